"""Mesh construction and the logical -> mesh sharding rules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxrl_agent.learner import mesh as mesh_lib
from jaxrl_agent.learner import sharding as sh
from jaxrl_agent.learner import train_state as ts
from jaxrl_agent.learner.hparams import LearnerHParams
from jaxrl_agent.models.config import tiny_config


def test_make_mesh_axes_types_and_fill():
    mesh = mesh_lib.make_mesh((2, -1, 2))
    assert mesh.axis_names == ("data", "fsdp", "tensor")
    assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)
    assert mesh_lib.data_parallel_size(mesh) == 4
    with pytest.raises(ValueError, match="mesh_shape: expected 3 ints"):
        mesh_lib.make_mesh((8, 1))
    with pytest.raises(ValueError, match="cannot fill 8 devices"):
        mesh_lib.make_mesh((3, -1, 1))


def test_rule_table_maps_logical_names():
    assert sh.logical_to_mesh_spec(P("batch", "length")) == P(("data", "fsdp"), None)
    assert sh.logical_to_mesh_spec(P("vocab", "embed")) == P("tensor", "fsdp")
    assert sh.logical_to_mesh_spec(P("embed", "heads", "head_dim")) == P("fsdp", "tensor", None)
    with pytest.raises(ValueError, match="'nope' has no sharding rule"):
        sh.logical_to_mesh_spec(P("nope"))
    mesh = mesh_lib.make_mesh((1, 2, 4))
    # heads=2 does not divide over tensor=4: that dimension stays replicated.
    assert sh.logical_to_mesh_spec(P("embed", "kv_heads"), shape=(64, 2), mesh=mesh) == P("fsdp", None)


def test_state_shardings_follow_params_and_batch_rows():
    cfg = tiny_config()
    hp = LearnerHParams(estimator="gae")
    mesh = mesh_lib.make_mesh((2, 2, 2))
    shard = ts.state_shardings(cfg, hp, mesh)
    assert shard.params["embed_tokens"].spec == P("tensor", "fsdp")
    assert shard.params["layers_0"]["mlp"]["down_proj"]["kernel"].spec == P("tensor", "fsdp")
    # Adam moments mirror their parameter; the step counter is replicated.
    adam = shard.opt_state[1][0]
    assert adam.mu["layers_0"]["self_attn"]["q_proj"]["kernel"].spec == P("fsdp", "tensor", None)
    assert adam.count.spec == P()
    assert shard.value_params["value_head"]["kernel"].spec == P("fsdp")
    x = sh.shard_batch({"tokens": np.zeros((8, 4), np.int32), "mask": np.zeros((8,), bool)}, mesh)
    assert x["tokens"].sharding.spec == P(("data", "fsdp"), None)
    assert x["tokens"].addressable_shards[0].data.shape == (2, 4)
    with pytest.raises(ValueError, match="batch_size: 6 is not divisible by the data-parallel size 4"):
        sh.shard_batch({"tokens": jnp.zeros((6, 4))}, mesh)
