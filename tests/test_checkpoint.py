"""Orbax checkpoints: resharding restore, keep-last-K, atomicity, clear errors."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxrl_agent.learner import checkpoint as ckpt_lib
from jaxrl_agent.learner import mesh as mesh_lib


def _state(mesh):
    w = jnp.arange(64 * 16, dtype=jnp.float32).reshape(64, 16) / 7.0
    b = jnp.arange(16, dtype=jnp.float32)
    return {
        "w": jax.device_put(w, NamedSharding(mesh, P(("data", "fsdp"), "tensor"))),
        "b": jax.device_put(b, NamedSharding(mesh, P())),
        "step": jax.device_put(jnp.asarray(3, jnp.int32), NamedSharding(mesh, P())),
    }


def _target(mesh):
    shapes = jax.eval_shape(lambda: _state(mesh_lib.single_device_mesh()))
    shard = {
        "w": NamedSharding(mesh, P("fsdp", "tensor")),
        "b": NamedSharding(mesh, P("tensor")),
        "step": NamedSharding(mesh, P()),
    }
    return ckpt_lib.abstract_like(shapes, shard)


def test_save_on_8x1x1_restore_on_2x2x2_and_one_device(tmp_path):
    src = _state(mesh_lib.make_mesh((8, 1, 1)))
    with ckpt_lib.Checkpointer(tmp_path / "ck") as ck:
        assert ck.save(3, src, {"iterator": {"pos": 17}, "config": "x"})
        ck.wait()
        for shape, devices in (((2, 2, 2), None), ((1, 1, 1), jax.devices()[:1])):
            mesh = mesh_lib.make_mesh(shape, devices=devices)
            state, meta = ck.restore(_target(mesh))
            assert meta == {"iterator": {"pos": 17}, "config": "x"}
            assert state["w"].sharding.mesh.shape == mesh.shape
            for k in src:
                np.testing.assert_array_equal(np.asarray(state[k]), np.asarray(src[k]))


def test_interval_and_keep_last_k(tmp_path):
    state = _state(mesh_lib.single_device_mesh())
    with ckpt_lib.Checkpointer(tmp_path, save_interval_steps=2, max_to_keep=2) as ck:
        saved = [ck.save(s, state) for s in range(7)]
        ck.wait()
        assert saved == [True, False, True, False, True, False, True]
        assert ck.all_steps() == [4, 6]


def test_missing_dir_and_empty_dir_errors_name_the_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ckpt_lib.CheckpointError, match=str(missing)):
        ckpt_lib.Checkpointer(missing, create=False)
    with ckpt_lib.Checkpointer(tmp_path / "empty") as ck:
        with pytest.raises(ckpt_lib.CheckpointError, match="no committed checkpoint.*empty"):
            ck.restore(_target(mesh_lib.single_device_mesh()))


def test_unfinished_tmp_dir_is_ignored_and_truncated_files_error(tmp_path):
    state = _state(mesh_lib.single_device_mesh())
    with ckpt_lib.Checkpointer(tmp_path, async_save=False) as ck:
        ck.save(1, state, force=True)
    # A crash mid-save leaves orbax's temporary directory behind.
    os.makedirs(tmp_path / "2.orbax-checkpoint-tmp-123" / "state")
    with ckpt_lib.Checkpointer(tmp_path) as ck:
        assert ck.latest_step() == 1
        restored, _ = ck.restore(_target(mesh_lib.single_device_mesh()))
        np.testing.assert_array_equal(np.asarray(restored["w"]), np.asarray(state["w"]))
    # Truncate every data file of the committed step: restore must fail loudly.
    for root, _, files in os.walk(tmp_path / "1" / "state"):
        for f in files:
            with open(os.path.join(root, f), "r+b") as fh:
                fh.truncate(1)
    with ckpt_lib.Checkpointer(tmp_path) as ck:
        with pytest.raises(ckpt_lib.CheckpointError, match=str(tmp_path / "1")):
            ck.restore(_target(mesh_lib.single_device_mesh()))
