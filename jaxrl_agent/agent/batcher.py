"""Batcher: pads Trajectories into a static-shape Batch (numpy) with bucketed sizes.

Shapes come from a few buckets so the jitted train step compiles once per
bucket: T is the smallest token bucket >= the longest episode, S the smallest
step bucket >= the most turns, and B is padded up to a multiple of
`batch_multiple` (e.g. the data-parallel device count) with rows whose
episode_mask is false. One episode per row, right-padded.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxrl_agent.checks import check_positive
from jaxrl_agent.types import Batch, Trajectory


def power_of_two_buckets(max_len: int, min_len: int = 16) -> tuple[int, ...]:
    """Powers of two from min_len up to (and always including) max_len.

    Example: power_of_two_buckets(1000, 128) == (128, 256, 512, 1000).

    Raises:
        ValueError: max_len or min_len < 1.
    """
    check_positive("max_len", max_len)
    check_positive("min_len", min_len)
    buckets, b = [], 1
    while b < min_len:
        b *= 2
    while b < max_len:
        buckets.append(b)
        b *= 2
    buckets.append(max_len)
    return tuple(buckets)


def bucket_size(n: int, buckets: Sequence[int], *, what: str = "length") -> int:
    """Smallest bucket >= n. Raises ValueError when n exceeds the largest bucket."""
    fitting = [b for b in buckets if b >= n]
    if not fitting:
        raise ValueError(f"{what}: {n} exceeds the largest bucket {max(buckets)} (buckets {sorted(buckets)})")
    return min(fitting)


def _describe(i: int, traj: Trajectory) -> str:
    task = traj.info.get("task_id")
    return f"trajectories[{i}] (group_id={traj.group_id}" + (f", task_id={task!r})" if task is not None else ")")


def make_batch(
    trajectories: Sequence[Trajectory],
    *,
    token_buckets: Sequence[int],
    step_buckets: Sequence[int],
    batch_multiple: int = 1,
    pad_id: int = 0,
) -> Batch:
    """Pads trajectories into a Batch of numpy arrays.

    Args:
        trajectories: N validated episodes.
        token_buckets: allowed T values; T = smallest bucket >= max L.
        step_buckets: allowed S values; S = smallest bucket >= max number of turns.
        batch_multiple: B = N rounded up to a multiple of this (padding rows have
            episode_mask false, group_ids -1).
        pad_id: token id on padding positions.

    Returns:
        Batch with tokens/step_ids/positions/segment_ids [B, T] int32, loss_mask
        [B, T] bool, rollout_logprobs [B, T] float32, step_rewards [B, S] float32,
        step_mask [B, S] bool, weight_versions [B, S] int32 (-1 on padding),
        terminated/truncated/episode_mask [B] bool, group_ids [B] int32.
        Padding values: tokens pad_id, loss_mask false, step_ids -1, logprobs 0,
        positions 0, segment_ids 0, rewards 0.

    Raises:
        ValueError: no trajectories, or one longer (tokens or turns) than the
            largest bucket, naming the trajectory.
    """
    if not trajectories:
        raise ValueError("trajectories: expected at least one Trajectory, got none")
    check_positive("batch_multiple", batch_multiple)
    for i, traj in enumerate(trajectories):
        if traj.num_tokens > max(token_buckets):
            raise ValueError(f"{_describe(i, traj)}: {traj.num_tokens} tokens exceed the largest "
                             f"token bucket {max(token_buckets)}")
        if traj.num_steps > max(step_buckets):
            raise ValueError(f"{_describe(i, traj)}: {traj.num_steps} turns exceed the largest "
                             f"step bucket {max(step_buckets)}")
    n = len(trajectories)
    t = bucket_size(max(tr.num_tokens for tr in trajectories), token_buckets, what="tokens")
    s = bucket_size(max(tr.num_steps for tr in trajectories), step_buckets, what="steps")
    b = -(-n // batch_multiple) * batch_multiple

    tokens = np.full((b, t), pad_id, np.int32)
    loss_mask = np.zeros((b, t), bool)
    step_ids = np.full((b, t), -1, np.int32)
    logprobs = np.zeros((b, t), np.float32)
    positions = np.zeros((b, t), np.int32)
    segment_ids = np.zeros((b, t), np.int32)
    step_rewards = np.zeros((b, s), np.float32)
    step_mask = np.zeros((b, s), bool)
    weight_versions = np.full((b, s), -1, np.int32)
    terminated = np.zeros((b,), bool)
    truncated = np.zeros((b,), bool)
    group_ids = np.full((b,), -1, np.int32)
    episode_mask = np.zeros((b,), bool)
    for i, traj in enumerate(trajectories):
        length, steps = traj.num_tokens, traj.num_steps
        tokens[i, :length] = traj.tokens
        loss_mask[i, :length] = traj.loss_mask
        step_ids[i, :length] = traj.step_ids
        logprobs[i, :length] = np.where(traj.loss_mask, traj.rollout_logprobs, 0.0)
        positions[i, :length] = np.arange(length, dtype=np.int32)
        segment_ids[i, :length] = 1
        step_rewards[i, :steps] = traj.step_rewards
        step_mask[i, :steps] = True
        weight_versions[i, :steps] = traj.weight_versions
        terminated[i], truncated[i] = traj.terminated, traj.truncated
        group_ids[i] = traj.group_id
        episode_mask[i] = True
    return Batch(
        tokens=tokens, loss_mask=loss_mask, step_ids=step_ids, rollout_logprobs=logprobs,
        positions=positions, segment_ids=segment_ids, step_rewards=step_rewards, step_mask=step_mask,
        weight_versions=weight_versions, terminated=terminated, truncated=truncated,
        group_ids=group_ids, episode_mask=episode_mask,
    )
