"""KV cache: prefill + decode steps equal the full forward pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_agent.models import kv_cache
from jaxrl_agent.models.config import tiny_config
from jaxrl_agent.models.transformer import compute_logits, forward_hidden, init_params

F32 = tiny_config(dtype="float32", tie_word_embeddings=False)
prefill = jax.jit(kv_cache.prefill, static_argnames="config")
decode_step = jax.jit(kv_cache.decode_step, static_argnames="config")


@jax.jit
def _full_logits(params, tokens, segment_ids):
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    return compute_logits(params, F32, forward_hidden(params, F32, tokens, positions, segment_ids))


def test_prefill_then_decode_equals_full_forward():
    params = init_params(F32, jax.random.key(0))
    lengths = np.array([5, 2, 7], np.int32)
    steps, max_len = 4, 12
    rng = np.random.default_rng(0)
    full = rng.integers(1, 256, size=(3, 7 + steps)).astype(np.int32)
    prompts = np.where(np.arange(7) < lengths[:, None], full[:, :7], 0)  # right-padded
    generated = full[:, 7:]  # the tokens fed at decode steps 0..steps-1

    cache = kv_cache.init_cache(F32, 3, max_len)
    assert cache.k.shape == (2, 3, max_len, 2, 16) and cache.k.dtype == jnp.float32
    logits, cache = prefill(params, F32, jnp.asarray(prompts), jnp.asarray(lengths), cache)
    step_logits = [logits]
    for j in range(steps):
        logits, cache = decode_step(params, F32, jnp.asarray(generated[:, j]), cache)
        step_logits.append(logits)
    np.testing.assert_array_equal(cache.lengths, lengths + steps)

    # Reference: each row's prompt followed by its generated tokens, in one padded batch.
    total = lengths + steps
    seqs = np.zeros((3, 7 + steps), np.int32)
    for b in range(3):
        seqs[b, :total[b]] = np.concatenate([full[b, :lengths[b]], generated[b]])
    segments = (np.arange(7 + steps) < total[:, None]).astype(np.int32)
    ref = np.asarray(_full_logits(params, jnp.asarray(seqs), jnp.asarray(segments)))
    for j, got in enumerate(step_logits):
        want = ref[np.arange(3), lengths - 1 + j]
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=f"step {j}")
    assert decode_step._cache_size() == 1  # one compilation for every step and length mix


def test_bf16_cache_and_shape_errors():
    config = tiny_config()  # bfloat16 compute
    params = init_params(config, jax.random.key(1))
    cache = kv_cache.init_cache(config, 2, 8)
    assert cache.k.dtype == jnp.bfloat16
    tokens = jnp.array([[3, 4, 5, 0], [6, 7, 0, 0]], jnp.int32)
    logits, cache = prefill(params, config, tokens, jnp.array([3, 2], jnp.int32), cache)
    logits, cache = decode_step(params, config, jnp.array([1, 2], jnp.int32), cache)
    assert logits.shape == (2, 256) and logits.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(logits)))
    with pytest.raises(ValueError, match="tokens"):
        kv_cache.decode_step(params, config, jnp.zeros((3,), jnp.int32), cache)
    with pytest.raises(ValueError, match="max_len"):
        kv_cache.prefill(params, config, jnp.zeros((2, 9), jnp.int32),
                         jnp.array([1, 1], jnp.int32), cache)
