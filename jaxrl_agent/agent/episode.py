"""EpisodeRecord: the growing token/step arrays of one episode, then a Trajectory.

The actor appends the prompt, each action (engine ids + logprobs) and each
observation suffix; `to_trajectory` packs them into the numpy arrays of the
trajectory contract (docs/DESIGN.md) and validates them.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import numpy as np

from jaxrl_agent.types import Trajectory

_TRAILING_INT = re.compile(r"(\d+)$")
_COUNTER_SKIP = {"system_prompt", "task_id", "turn", "max_turns"}


def _is_number(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.number))


def parse_weight_version(version: Any) -> int:
    """Engine weight_version string -> int ("12", "step-12" -> 12); -1 when it has no number."""
    if isinstance(version, (int, np.integer)):
        return int(version)
    text = str(version).strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    match = _TRAILING_INT.search(text)
    return int(match.group(1)) if match else -1


class EpisodeRecord:
    """Mutable per-episode buffers (plain Python lists until `to_trajectory`)."""

    def __init__(self, *, group_id: int, sample_index: int, reset_info: Mapping[str, Any]):
        self.tokens: list[int] = []
        self.loss_mask: list[bool] = []
        self.step_ids: list[int] = []
        self.logprobs: list[float] = []
        self.step_rewards: list[float] = []
        self.weight_versions: list[int] = []
        self.terminated = False
        self.truncated = False
        self.group_id = group_id
        self.info: dict[str, Any] = {
            "task_id": reset_info.get("task_id"),
            "sample_index": sample_index,
            "prompt_tokens": 0,
            "num_turns": 0,
            "finish_reasons": [],
            "tool_calls": 0,
            "invalid_tool_calls": 0,
            "env_counters": {},
            "aborted": False,
            "truncation": None,
            "generate_s": 0.0,
            "env_s": 0.0,
        }

    @property
    def turn(self) -> int:
        """Index of the current (last started) turn; -1 before the first action."""
        return len(self.step_rewards) - 1

    def add_prompt(self, ids: Sequence[int]) -> None:
        self._extend(ids, step=-1, generated=False)
        self.info["prompt_tokens"] = len(ids)

    def add_action(self, ids: Sequence[int], logprobs: Sequence[float], weight_version: int, finish: str) -> None:
        """Starts turn k: engine ids (loss_mask true) with their logprobs; reward 0 until stepped."""
        self.step_rewards.append(0.0)
        self.weight_versions.append(weight_version)
        self._extend(ids, step=self.turn, generated=True, logprobs=logprobs)
        self.info["finish_reasons"].append(finish)
        self.info["num_turns"] = len(self.step_rewards)

    def add_step_result(self, reward: float, info: Mapping[str, Any]) -> None:
        """Records env.step's reward for the current turn and folds its info into the counters.

        Numeric info values (and numeric values of dict-valued entries, as
        "key/sub") are summed over turns into info["env_counters"], except episode
        totals (keys ending in "_total" / "_total_s"), which keep the last value.
        """
        self.step_rewards[self.turn] = reward
        counters = self.info["env_counters"]
        for key, value in info.items():
            if key in _COUNTER_SKIP:
                continue
            if isinstance(value, dict):
                for sub, v in value.items():
                    if _is_number(v):
                        counters[f"{key}/{sub}"] = counters.get(f"{key}/{sub}", 0) + v
            elif _is_number(value):
                last = key.endswith("_total") or key.endswith("_total_s")
                counters[key] = value if last else counters.get(key, 0) + value
        for key, aliases in (("tool_calls", ("tool_calls", "num_tool_calls")),
                             ("invalid_tool_calls", ("invalid_tool_calls", "invalid_tool_call", "num_invalid_tool_calls"))):
            value = next((info[a] for a in aliases if a in info), None)
            if isinstance(value, (list, tuple)):
                value = len(value)
            if isinstance(value, (int, np.integer)):
                self.info[key] += int(value)

    def add_observation(self, ids: Sequence[int]) -> None:
        """Observation-suffix ids of the current turn (loss_mask false)."""
        self._extend(ids, step=self.turn, generated=False)

    def truncate(self, reason: str) -> None:
        self.finish(terminated=False, reason=reason)

    def finish(self, *, terminated: bool, reason: str | None) -> None:
        self.terminated = terminated
        self.truncated = not terminated
        self.info["truncation"] = reason if not terminated else None

    def env_failed(self, message: str, *, terminated: bool) -> None:
        """env.step raised (terminated) or timed out (truncated); reward of the turn stays 0."""
        self.info["env_error"] = message
        self.finish(terminated=terminated, reason=None if terminated else "env_timeout")

    def _extend(self, ids, *, step: int, generated: bool, logprobs: Sequence[float] | None = None) -> None:
        n = len(ids)
        self.tokens.extend(ids)  # converted to int32 once, in to_trajectory
        self.loss_mask.extend([generated] * n)
        self.step_ids.extend([step] * n)
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * n)

    def to_trajectory(self) -> Trajectory:
        """Packs the buffers into a validated Trajectory (numpy, int32/bool/float32)."""
        if not (self.terminated or self.truncated):
            raise ValueError("episode: to_trajectory called before the episode ended")
        return Trajectory(
            tokens=np.asarray(self.tokens, np.int32),
            loss_mask=np.asarray(self.loss_mask, bool),
            step_ids=np.asarray(self.step_ids, np.int32),
            rollout_logprobs=np.asarray(self.logprobs, np.float32),
            step_rewards=np.asarray(self.step_rewards, np.float32),
            weight_versions=np.asarray(self.weight_versions, np.int32),
            terminated=self.terminated,
            truncated=self.truncated,
            group_id=self.group_id,
            info=self.info,
        ).validate()
