"""Transformer, logprobs and value head on tiny configs (float32 for exact checks)."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

from jaxrl_agent.models import axes
from jaxrl_agent.models.config import ModelConfig, tiny_config
from jaxrl_agent.models import logprobs as logprobs_lib
from jaxrl_agent.models.transformer import (
    compute_logits,
    forward_hidden,
    init_params,
    param_logical_axes,
)
from jaxrl_agent.models.value import compute_values, init_value_params, value_param_logical_axes

F32 = tiny_config(dtype="float32", tie_word_embeddings=False)
# Jitted (eager op-by-op dispatch is slow on CPU); config and chunk sizes are static.
STATIC = ("config", "chunk_size", "return_entropy")
token_logprobs = jax.jit(logprobs_lib.token_logprobs, static_argnames=STATIC)
logprobs_from_hidden = jax.jit(logprobs_lib.logprobs_from_hidden, static_argnames=STATIC)
forward_hidden = jax.jit(forward_hidden, static_argnames="config")
compute_values = jax.jit(compute_values, static_argnames="config")


@pytest.fixture(scope="module")
def params():
    return init_params(F32, jax.random.key(0))


def _inputs(b, t, seed=0, vocab=256):
    tokens = jax.random.randint(jax.random.key(seed), (b, t), 0, vocab, dtype=jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    return tokens, positions, jnp.ones((b, t), jnp.int32)


@functools.partial(jax.jit, static_argnums=1)
def _full_logits(params, config, tokens, positions, segment_ids):
    return compute_logits(params, config, forward_hidden(params, config, tokens, positions,
                                                          segment_ids))


def test_default_dtypes_and_logical_axes():
    config = tiny_config()
    assert (config.dtype, config.param_dtype) == ("bfloat16", "float32")
    p = init_params(config, jax.random.key(0))
    assert {x.dtype for x in jax.tree.leaves(p)} == {jnp.dtype(jnp.float32)}
    assert "lm_head" not in p  # tied
    tokens, positions, seg = _inputs(2, 8)
    hidden = forward_hidden(p, config, tokens, positions, seg)
    assert hidden.dtype == jnp.bfloat16 and hidden.shape == (2, 8, 64)
    logits = compute_logits(p, config, hidden)
    assert logits.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(logits)))

    specs = param_logical_axes(F32)
    p32 = init_params(F32, jax.random.key(0))
    assert jax.tree.structure(p32) == jax.tree.structure(
        specs, is_leaf=lambda x: isinstance(x, PartitionSpec))
    assert specs["embed_tokens"] == PartitionSpec(axes.VOCAB, axes.EMBED)
    assert specs["lm_head"] == PartitionSpec(axes.EMBED, axes.VOCAB)
    assert specs["layers_0"]["self_attn"]["k_proj"]["kernel"] == PartitionSpec(
        axes.EMBED, axes.KV_HEADS, axes.HEAD_DIM)
    jax.tree.map(lambda x, s: len(s) == x.ndim or pytest.fail(f"{s} vs {x.shape}"), p32, specs,
                 is_leaf=lambda x: isinstance(x, PartitionSpec))


def test_config_hf_dict_round_trip_and_errors():
    config = tiny_config(family="llama", qk_norm=False, rope_theta=5e5,
                         rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 64})
    d = config.to_hf_dict()
    assert d["model_type"] == "llama" and d["rope_parameters"]["rope_theta"] == 5e5
    assert ModelConfig.from_hf_dict(d) == config
    assert hash(ModelConfig.from_hf_dict(d)) == hash(config)
    with pytest.raises(ValueError, match="num_heads"):
        tiny_config(num_heads=3)
    with pytest.raises(ValueError, match="rope_type"):
        tiny_config(rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(ValueError, match="mlp_bias"):
        ModelConfig.from_hf_dict({**d, "mlp_bias": True})


def test_packed_segments_equal_separate_runs(params):
    a, _, _ = _inputs(1, 7, seed=1)
    b, _, _ = _inputs(1, 5, seed=2)
    packed = jnp.concatenate([a, b, jnp.zeros((1, 4), jnp.int32)], axis=1)  # + padding
    positions = jnp.concatenate([jnp.arange(7), jnp.arange(5), jnp.zeros(4, int)])[None]
    segments = jnp.array([[1] * 7 + [2] * 5 + [0] * 4])
    out = _full_logits(params, F32, packed, positions.astype(jnp.int32), segments)
    assert bool(jnp.all(jnp.isfinite(out)))
    for tokens, sl in ((a, slice(0, 7)), (b, slice(7, 12))):
        t = tokens.shape[1]
        alone = _full_logits(params, F32, tokens, jnp.arange(t, dtype=jnp.int32)[None],
                             jnp.ones((1, t), jnp.int32))
        np.testing.assert_allclose(out[:, sl], alone, atol=1e-5, rtol=0)


def test_bad_shapes_are_named(params):
    tokens, positions, seg = _inputs(2, 8)
    with pytest.raises(ValueError, match="positions"):
        forward_hidden(params, F32, tokens, positions[:, :4], seg)
    with pytest.raises(ValueError, match="chunk_size"):
        token_logprobs(params, F32, tokens, positions, seg, chunk_size=0)
    with pytest.raises(ValueError, match="temperature"):
        logprobs_lib.token_logprobs(params, F32, tokens, positions, seg, temperature=0.0)


@pytest.mark.parametrize("temperature,chunk", [(1.0, 5), (0.7, 64)])
def test_chunked_logprobs_match_full_log_softmax(params, temperature, chunk):
    tokens, positions, seg = _inputs(2, 13, seed=3)
    logp, ent = token_logprobs(params, F32, tokens, positions, seg, temperature=temperature,
                               chunk_size=chunk)
    logits = _full_logits(params, F32, tokens, positions, seg)[:, :-1] / temperature
    full = jax.nn.log_softmax(logits, axis=-1)
    want = jnp.take_along_axis(full, tokens[:, 1:, None], axis=-1)[..., 0]
    want_ent = -jnp.sum(jnp.exp(full) * full, axis=-1)
    assert logp.shape == ent.shape == (2, 13) and logp.dtype == jnp.float32
    np.testing.assert_array_equal(logp[:, 0], 0.0)
    np.testing.assert_allclose(logp[:, 1:], want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(ent[:, 1:], want_ent, atol=1e-5, rtol=0)


def test_logprobs_zero_on_padding_and_segment_starts(params):
    tokens, positions, _ = _inputs(1, 10, seed=4)
    seg = jnp.array([[1, 1, 1, 2, 2, 2, 2, 0, 0, 0]])
    logp, ent = token_logprobs(params, F32, tokens, positions, seg, chunk_size=4)
    zero = np.array([1, 0, 0, 1, 0, 0, 0, 1, 1, 1], bool)
    np.testing.assert_array_equal(np.asarray(logp)[0, zero], 0.0)
    np.testing.assert_array_equal(np.asarray(ent)[0, zero], 0.0)
    assert np.all(np.asarray(logp)[0, ~zero] < 0)


def test_logprob_gradient_matches_unchunked(params):
    tokens, positions, seg = _inputs(2, 9, seed=5)
    weights = jax.random.normal(jax.random.key(9), (2, 9))

    def chunked(p):
        logp, ent = token_logprobs(p, F32, tokens, positions, seg, chunk_size=3)
        return jnp.sum(weights * logp) + 0.1 * jnp.sum(ent)

    def full(p):
        logits = _full_logits(p, F32, tokens, positions, seg)[:, :-1]
        lsm = jax.nn.log_softmax(logits)
        logp = jnp.take_along_axis(lsm, tokens[:, 1:, None], axis=-1)[..., 0]
        ent = -jnp.sum(jnp.exp(lsm) * lsm, axis=-1)
        return jnp.sum(weights[:, 1:] * logp) + 0.1 * jnp.sum(ent)

    g1, g2 = jax.jit(jax.grad(chunked))(params), jax.jit(jax.grad(full))(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4), g1, g2)
    assert float(jnp.abs(g1["layers_0"]["self_attn"]["q_proj"]["kernel"]).sum()) > 0


def test_logprobs_from_hidden_and_bf16_runs():
    config = tiny_config()
    p = init_params(config, jax.random.key(2))
    tokens, positions, seg = _inputs(2, 6)
    hidden = forward_hidden(p, config, tokens, positions, seg)
    logp, ent = logprobs_from_hidden(hidden, p, config, tokens, temperature=1.0, chunk_size=2)
    logp2, none = token_logprobs(p, config, tokens, positions, seg, chunk_size=2,
                                 return_entropy=False)
    assert none is None and logp.dtype == jnp.float32
    np.testing.assert_allclose(logp, logp2, atol=1e-6)
    assert bool(jnp.all(jnp.isfinite(ent))) and bool(jnp.all(logp <= 0))


def test_value_head_reuses_backbone(params):
    vparams = init_value_params(F32, jax.random.key(3))
    assert "lm_head" not in vparams["backbone"]
    specs = value_param_logical_axes(F32)
    assert jax.tree.structure(vparams) == jax.tree.structure(
        specs, is_leaf=lambda x: isinstance(x, PartitionSpec))
    tokens, positions, seg = _inputs(2, 6)
    values = compute_values(vparams, F32, tokens, positions, seg)
    assert values.shape == (2, 6) and values.dtype == jnp.float32
    # A critic started from the policy: values are the hidden states dotted with the head.
    from_policy = {"backbone": params, "value_head": vparams["value_head"]}
    hidden = forward_hidden(params, F32, tokens, positions, seg)
    want = hidden @ vparams["value_head"]["kernel"] + vparams["value_head"]["bias"]
    np.testing.assert_allclose(compute_values(from_policy, F32, tokens, positions, seg), want,
                               atol=1e-6)


def test_logical_constraints_shard_under_mesh_rules(params):
    mesh = jax.make_mesh((2, 4), ("data", "tensor"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)
    rules = ((axes.BATCH, "data"), (axes.LENGTH, None), (axes.EMBED, None),
             (axes.VOCAB, "tensor"), (axes.MLP, "tensor"), (axes.HEADS, "tensor"),
             (axes.KV_HEADS, None), (axes.HEAD_DIM, None))
    tokens, positions, seg = _inputs(4, 8)
    shardings = nn.logical_to_mesh_sharding(param_logical_axes(F32), mesh, rules)
    sharded = jax.device_put(params, shardings)

    @jax.jit
    def run(p):
        with nn.logical_axis_rules(rules):
            return _full_logits(p, F32, tokens, positions, seg)

    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        out = run(sharded)
    np.testing.assert_allclose(out, _full_logits(params, F32, tokens, positions, seg), atol=1e-5)


def test_forward_compiles_once_per_shape(params):
    traces = []

    @jax.jit
    def fwd(p, tokens, positions, seg):
        traces.append(1)
        return token_logprobs(p, F32, tokens, positions, seg, chunk_size=4)[0]

    for seed in range(3):
        fwd(params, *_inputs(2, 8, seed=seed))
    assert len(traces) == 1
