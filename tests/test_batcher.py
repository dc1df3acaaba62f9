"""Batcher: bucketed shapes, padding values, B padding rows, errors naming the trajectory."""

import numpy as np
import pytest

from jaxrl_agent.agent.batcher import bucket_size, make_batch, power_of_two_buckets
from jaxrl_agent.types import Trajectory


def _traj(n_prompt, turns, group_id=0, version=3, task_id=None):
    """turns: list of (n_action, n_obs, reward)."""
    tokens, mask, steps, lp, rewards = [], [], [], [], []
    tokens += list(range(100, 100 + n_prompt))
    mask += [False] * n_prompt
    steps += [-1] * n_prompt
    lp += [0.0] * n_prompt
    for k, (n_act, n_obs, r) in enumerate(turns):
        tokens += [10 + k] * n_act + [50 + k] * n_obs
        mask += [True] * n_act + [False] * n_obs
        steps += [k] * (n_act + n_obs)
        lp += [-0.25] * n_act + [0.0] * n_obs
        rewards.append(r)
    return Trajectory(
        tokens=np.array(tokens, np.int32), loss_mask=np.array(mask), step_ids=np.array(steps, np.int32),
        rollout_logprobs=np.array(lp, np.float32), step_rewards=np.array(rewards, np.float32),
        weight_versions=np.full(len(turns), version, np.int32), terminated=True, group_id=group_id,
        info={} if task_id is None else {"task_id": task_id},
    ).validate()


def test_power_of_two_buckets():
    assert power_of_two_buckets(1000, 128) == (128, 256, 512, 1000)
    assert power_of_two_buckets(64, 16) == (16, 32, 64)
    assert power_of_two_buckets(10, 16) == (10,)
    assert bucket_size(33, (16, 32, 64)) == 64
    assert bucket_size(32, (16, 32, 64)) == 32
    with pytest.raises(ValueError, match="largest bucket 64"):
        bucket_size(65, (16, 32, 64))


def test_shapes_and_padding_values():
    a = _traj(3, [(2, 1, 0.0), (2, 0, 1.0)], group_id=7)  # L=8, S=2
    b = _traj(2, [(1, 0, 0.5)], group_id=8, version=4)  # L=3, S=1
    batch = make_batch([a, b], token_buckets=(4, 8, 16), step_buckets=(1, 2, 4), batch_multiple=4, pad_id=9)
    assert batch.shape == (4, 8, 2)
    np.testing.assert_array_equal(batch.tokens[0], [100, 101, 102, 10, 10, 50, 11, 11])
    np.testing.assert_array_equal(batch.tokens[1], [100, 101, 10, 9, 9, 9, 9, 9])
    np.testing.assert_array_equal(batch.tokens[2:], 9)
    np.testing.assert_array_equal(batch.loss_mask[1], [0, 0, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(batch.step_ids[0], [-1, -1, -1, 0, 0, 0, 1, 1])
    np.testing.assert_array_equal(batch.step_ids[1], [-1, -1, 0, -1, -1, -1, -1, -1])
    np.testing.assert_array_equal(batch.rollout_logprobs[1], [0, 0, -0.25, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(batch.positions[0], np.arange(8))
    np.testing.assert_array_equal(batch.positions[1], [0, 1, 2, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(batch.segment_ids[1], [1, 1, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(batch.step_rewards, [[0, 1], [0.5, 0], [0, 0], [0, 0]])
    np.testing.assert_array_equal(batch.step_mask, [[1, 1], [1, 0], [0, 0], [0, 0]])
    np.testing.assert_array_equal(batch.weight_versions, [[3, 3], [4, -1], [-1, -1], [-1, -1]])
    np.testing.assert_array_equal(batch.group_ids, [7, 8, -1, -1])
    np.testing.assert_array_equal(batch.episode_mask, [1, 1, 0, 0])
    np.testing.assert_array_equal(batch.terminated, [1, 1, 0, 0])
    np.testing.assert_array_equal(batch.truncated, 0)
    dtypes = {f: getattr(batch, f).dtype for f in batch._fields}
    assert dtypes["tokens"] == np.int32 and dtypes["loss_mask"] == bool
    assert dtypes["rollout_logprobs"] == np.float32 and dtypes["group_ids"] == np.int32


def test_bucket_choice_is_static():
    short = [_traj(2, [(1, 0, 0.0)])]  # L=3 -> T=4
    longer = [_traj(5, [(1, 1, 0.0)])]  # L=7 -> T=8
    buckets = dict(token_buckets=(4, 8, 16), step_buckets=(2, 4))
    assert make_batch(short, **buckets).shape == (1, 4, 2)
    assert make_batch(longer, **buckets).shape == (1, 8, 2)
    assert make_batch(short * 5, batch_multiple=4, **buckets).shape == (8, 4, 2)


def test_errors_name_the_trajectory():
    ok, too_long = _traj(2, [(1, 0, 0.0)]), _traj(20, [(1, 0, 0.0)], group_id=5, task_id="calc-3")
    with pytest.raises(ValueError, match=r"trajectories\[1\] \(group_id=5, task_id='calc-3'\): 21 tokens"):
        make_batch([ok, too_long], token_buckets=(8, 16), step_buckets=(4,))
    many_turns = _traj(1, [(1, 0, 0.0)] * 5, group_id=2)
    with pytest.raises(ValueError, match=r"trajectories\[0\] \(group_id=2\): 5 turns"):
        make_batch([many_turns], token_buckets=(16,), step_buckets=(2, 4))
    with pytest.raises(ValueError, match="at least one"):
        make_batch([], token_buckets=(16,), step_buckets=(4,))
