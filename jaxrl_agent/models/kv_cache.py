"""Static-shape KV cache for the embedded engine: prefill, then one token per step.

Every row has its own length: prompts of different lengths share one
right-padded batch, row b's next token is written at slot lengths[b] and gets
RoPE position lengths[b], and attention reads slots 0..lengths[b] only, so the
padding a prefill wrote past a row's length is never read (and is overwritten
by the row's decode steps). All shapes are static: prefill compiles once per
(B, T, max_len), decode_step once per (B, max_len).

The caller must stop a row before lengths[b] reaches max_len: a decode step on
a full row overwrites slot max_len - 1 (dynamic_update_slice clamps) and its
logits are not meaningful.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_agent.checks import check_shape
from jaxrl_agent.models.config import ModelConfig
from jaxrl_agent.models.layers import Transformer
from jaxrl_agent.models.transformer import causal_segment_mask, compute_logits


class KVCache(NamedTuple):
    """Keys/values of every layer; a pytree.

    Attributes:
        k: [layers, B, max_len, K, head_dim] keys (RoPE applied).
        v: [layers, B, max_len, K, head_dim] values.
        lengths: [B] int32 tokens cached per row (= position of the next token).
    """

    k: jax.Array
    v: jax.Array
    lengths: jax.Array

    @property
    def max_len(self) -> int:
        return self.k.shape[2]


def init_cache(config: ModelConfig, batch_size: int, max_len: int, dtype=None) -> KVCache:
    """An empty cache (zeros, lengths 0) in `dtype` (default config.dtype)."""
    dtype = jnp.dtype(dtype or config.dtype)
    shape = (config.num_layers, batch_size, max_len, config.num_kv_heads, config.head_dim)
    return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype),
                   jnp.zeros((batch_size,), jnp.int32))


def _check_cache(cache: KVCache, config: ModelConfig, dims: dict):
    spec = (config.num_layers, "B", None, config.num_kv_heads, config.head_dim)
    check_shape("cache.k", cache.k, spec, dims)
    check_shape("cache.v", cache.v, spec, dims)
    check_shape("cache.lengths", cache.lengths, ("B",), dims)


def prefill(params, config: ModelConfig, tokens, lengths, cache: KVCache):
    """Runs right-padded prompts and fills the cache from slot 0.

    Args:
        params, config: the policy.
        tokens: [B, T] int32 prompts, right-padded (T <= max_len).
        lengths: [B] int32 prompt lengths, 1 <= lengths[b] <= T.
        cache: a KVCache of batch B (its previous content is replaced).

    Returns:
        (last_logits [B, V] float32: logits at position lengths - 1, the new cache
        with cache.lengths = lengths).

    Raises:
        ValueError: on mismatched shapes or T > max_len.
    """
    dims: dict = {}
    _check_cache(cache, config, dims)
    check_shape("tokens", tokens, ("B", "T"), dims)
    check_shape("lengths", lengths, ("B",), dims)
    b, t = tokens.shape
    if t > cache.max_len:
        raise ValueError(f"tokens: expected T <= max_len={cache.max_len}, got shape {[b, t]}")
    lengths = lengths.astype(jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    segment_ids = (positions < lengths[:, None]).astype(jnp.int32)
    hidden, (ks, vs) = Transformer(config).apply(
        {"params": params}, tokens, positions, causal_segment_mask(segment_ids))
    last = jnp.take_along_axis(hidden, jnp.clip(lengths - 1, 0, t - 1)[:, None, None], axis=1)
    k = jax.lax.dynamic_update_slice(cache.k, jnp.stack(ks).astype(cache.k.dtype), (0, 0, 0, 0, 0))
    v = jax.lax.dynamic_update_slice(cache.v, jnp.stack(vs).astype(cache.v.dtype), (0, 0, 0, 0, 0))
    return compute_logits(params, config, last[:, 0]), KVCache(k, v, lengths)


def decode_step(params, config: ModelConfig, tokens, cache: KVCache):
    """Appends one token per row at position cache.lengths and returns its logits.

    Args:
        params, config: the policy.
        tokens: [B] int32, the next token of every row.
        cache: the KVCache after prefill (and earlier decode steps).

    Returns:
        (logits [B, V] float32 of the next-next token, cache with lengths + 1).

    Raises:
        ValueError: on mismatched shapes.
    """
    dims: dict = {}
    _check_cache(cache, config, dims)
    check_shape("tokens", tokens, ("B",), dims)
    positions = cache.lengths[:, None]  # [B, 1]
    slots = jnp.arange(cache.max_len, dtype=jnp.int32)
    mask = (slots[None, :] <= cache.lengths[:, None])[:, None, :]  # [B, 1, max_len]
    hidden, (ks, vs) = Transformer(config).apply(
        {"params": params}, tokens[:, None], positions, mask,
        cache=(cache.k, cache.v), write_index=cache.lengths)
    new_cache = KVCache(jnp.stack(ks), jnp.stack(vs), cache.lengths + 1)
    return compute_logits(params, config, hidden[:, 0]), new_cache
