"""Trajectory (host, one episode) and Batch (device, padded) containers.

Shape legend (used in every docstring of the package):
    B batch (episodes), T tokens, S steps (turns), G group size, V vocabulary,
    D model width, H attention heads, K key/value heads, L episode length.

Alignment convention: every per-token array is aligned with the token it
describes. `rollout_logprobs[t]` is log pi(tokens[t] | tokens[:t]); a learner
computing logits from `tokens[:, :-1]` therefore writes its logprob of
`tokens[:, 1:]` into positions 1..T-1 (position 0, always a prompt token, has
none). `loss_mask[t]` is true exactly on tokens the policy generated.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np


@dataclasses.dataclass
class Trajectory:
    """One episode as the actor records it (numpy, host side).

    Attributes:
        tokens: [L] int32; prompt, then per turn the action tokens (exactly the ids
            the engine returned) and the observation tokens.
        loss_mask: [L] bool; true exactly on tokens the policy generated.
        step_ids: [L] int32; turn index k of the action and of its observation,
            -1 on the prompt.
        rollout_logprobs: [L] float32; engine logprob of each generated token, 0
            elsewhere.
        step_rewards: [S] float32; reward the env returned for turn k (an outcome
            reward lands on the last turn).
        weight_versions: [S] int32; policy version that produced turn k.
        terminated: gymnasium semantics: the episode reached a terminal state.
        truncated: the episode was cut (turn/context/time budget); not terminal,
            so estimators bootstrap from the value of the last state.
        group_id: the task instance; samples of one prompt share it.
        info: free-form episode information (tool calls, invalid calls, latency...).
    """

    tokens: np.ndarray
    loss_mask: np.ndarray
    step_ids: np.ndarray
    rollout_logprobs: np.ndarray
    step_rewards: np.ndarray
    weight_versions: np.ndarray
    terminated: bool = False
    truncated: bool = False
    group_id: int = 0
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def num_steps(self) -> int:
        return int(self.step_rewards.shape[0])

    @property
    def score(self) -> float:
        """Episode return: the sum of step rewards."""
        return float(np.sum(self.step_rewards))

    def validate(self) -> "Trajectory":
        """Checks the contract of docs/DESIGN.md; raises ValueError naming the field."""
        n = self.tokens.shape
        if self.tokens.ndim != 1:
            raise ValueError(f"tokens: expected shape [L], got {list(n)}")
        for name in ("loss_mask", "step_ids", "rollout_logprobs"):
            arr = getattr(self, name)
            if arr.shape != n:
                raise ValueError(f"{name}: expected shape [L]={list(n)}, got {list(arr.shape)}")
        s = self.step_rewards.shape
        if self.step_rewards.ndim != 1:
            raise ValueError(f"step_rewards: expected shape [S], got {list(s)}")
        if self.weight_versions.shape != s:
            raise ValueError(
                    f"weight_versions: expected shape [S]={list(s)}, got {list(self.weight_versions.shape)}"
            )
        if self.terminated and self.truncated:
            raise ValueError("terminated and truncated are both true; expected at most one")
        if n[0] and (self.step_ids.max(initial=-1) >= s[0]):
            raise ValueError(
                    f"step_ids: max {int(self.step_ids.max())} must be < S={s[0]} (number of step_rewards)"
            )
        if np.any(self.loss_mask & (self.step_ids < 0)):
            raise ValueError("loss_mask: true on a token with step_ids -1 (prompt); expected false there")
        return self


class Batch(NamedTuple):
    """Padded, device-side batch of episodes; a pytree of arrays.

    One episode per row, right-padded to a bucket length T; padding rows have
    `episode_mask` false.

    Attributes:
        tokens: [B, T] int32 token ids (0 on padding).
        loss_mask: [B, T] bool, true on generated (trainable) tokens.
        step_ids: [B, T] int32 turn index, -1 on prompt and padding.
        rollout_logprobs: [B, T] float32 engine logprobs, 0 where loss_mask is false.
        positions: [B, T] int32 position ids (0.. within each episode).
        segment_ids: [B, T] int32, 1 on real tokens, 0 on padding (attention never
            crosses segments).
        step_rewards: [B, S] float32 per-turn rewards, 0 on padding turns.
        step_mask: [B, S] bool, true on real turns.
        weight_versions: [B, S] int32 policy version of each turn (-1 on padding).
        terminated: [B] bool.
        truncated: [B] bool.
        group_ids: [B] int32 task-instance id (GRPO/RLOO groups); -1 on padding rows.
        episode_mask: [B] bool, true on real episodes.
    """

    tokens: Any
    loss_mask: Any
    step_ids: Any
    rollout_logprobs: Any
    positions: Any
    segment_ids: Any
    step_rewards: Any
    step_mask: Any
    weight_versions: Any
    terminated: Any
    truncated: Any
    group_ids: Any
    episode_mask: Any

    @property
    def shape(self) -> tuple[int, int, int]:
        """(B, T, S)."""
        b, t = np.shape(self.tokens)
        return b, t, np.shape(self.step_rewards)[1]
