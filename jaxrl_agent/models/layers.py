"""Flax linen building blocks of the Llama/Qwen decoder.

RMSNorm (Zhang & Sennrich 2019), SwiGLU MLP (Shazeer 2020), grouped-query
attention (Ainslie et al. 2023) with RoPE, optional q/k/v biases (Qwen2) and
per-head q/k RMSNorm (Qwen3). Parameters carry the logical axis names of
`jaxrl_agent.models.axes`; activations are constrained to (batch, length,
embed), which is a no-op unless the caller runs under a mesh with logical rules.

Attention is plain dot-product attention over an explicit boolean mask, so the
same module serves training (mask from segment ids) and the KV cache (mask from
cached lengths).
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_agent.models import axes
from jaxrl_agent.models.config import ModelConfig
from jaxrl_agent.models.rope import apply_rope

ACTIVATION_AXES = (axes.BATCH, axes.LENGTH, axes.EMBED)
_INIT = nn.initializers.normal(stddev=0.02)  # HF initializer_range
_MASKED = -1e30  # finite, so a row with every key masked stays NaN-free


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * scale, normalized in float32 (as HF)."""

    eps: float
    dtype: jnp.dtype
    param_dtype: jnp.dtype
    axis_name: str = axes.EMBED

    @nn.compact
    def __call__(self, x):
        scale = self.param(
            "scale",
            nn.with_logical_partitioning(nn.initializers.ones, (self.axis_name,)),
            (x.shape[-1],),
            self.param_dtype,
        )
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return y.astype(self.dtype) * scale.astype(self.dtype)


class Linear(nn.Module):
    """x[..., *in] @ kernel[*in, *out] (+ bias[*out]) with named axes."""

    in_shape: Sequence[int]
    out_shape: Sequence[int]
    kernel_axes: Sequence[str]
    dtype: jnp.dtype
    param_dtype: jnp.dtype
    use_bias: bool = False

    @nn.compact
    def __call__(self, x):
        n_in = len(self.in_shape)
        kernel = self.param(
            "kernel",
            nn.with_logical_partitioning(_INIT, tuple(self.kernel_axes)),
            (*self.in_shape, *self.out_shape),
            self.param_dtype,
        )
        y = jax.lax.dot_general(
            x.astype(self.dtype),
            kernel.astype(self.dtype),
            ((tuple(range(x.ndim - n_in, x.ndim)), tuple(range(n_in))), ((), ())),
        )
        if self.use_bias:
            bias = self.param(
                "bias",
                nn.with_logical_partitioning(nn.initializers.zeros, tuple(self.kernel_axes[n_in:])),
                tuple(self.out_shape),
                self.param_dtype,
            )
            y = y + bias.astype(self.dtype)
        return y


def dot_product_attention(q, k, v, mask):
    """Grouped-query softmax attention.

    Args:
        q: [B, T, H, head_dim] queries (RoPE applied).
        k: [B, S, K, head_dim] keys; H % K == 0, query head h reads kv head h // (H/K).
        v: [B, S, K, head_dim] values.
        mask: [B, T, S] bool, true where query t may read key s.

    Returns:
        [B, T, H, head_dim] in v's dtype; scores and softmax in float32.
    """
    b, t, h, d = q.shape
    kv_heads = k.shape[2]
    q = q.reshape(b, t, kv_heads, h // kv_heads, d)
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32)
    scores = scores * (d ** -0.5)
    scores = jnp.where(mask[:, None, None, :, :], scores, _MASKED)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
    return out.reshape(b, t, h, d)


def _write_rows(cache, new, index):
    """cache [B, S, K, hd] with new [B, T, K, hd] written at rows' offsets index [B]."""
    def one(c, n, i):
        return jax.lax.dynamic_update_slice(c, n.astype(c.dtype), (i, 0, 0))
    return jax.vmap(one)(cache, new, index)


class Attention(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, x, positions, mask, kv=None, write_index=None):
        """x [B, T, D]; mask [B, T, S]; kv None or a ([B, S, K, hd], [B, S, K, hd]) cache.

        Returns (y [B, T, D], (k, v)): the fresh keys/values [B, T, K, hd]
        without a cache, else the cache with them written at write_index [B].
        """
        c = self.config
        dt, pdt = jnp.dtype(c.dtype), jnp.dtype(c.param_dtype)
        d, h, kh, hd = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim

        def proj(name, heads, head_axis):
            return Linear((d,), (heads, hd), (axes.EMBED, head_axis, axes.HEAD_DIM), dt, pdt,
                          use_bias=c.attention_bias, name=name)(x)

        q = proj("q_proj", h, axes.HEADS)
        k = proj("k_proj", kh, axes.KV_HEADS)
        v = proj("v_proj", kh, axes.KV_HEADS)
        if c.qk_norm:
            q = RMSNorm(c.rms_norm_eps, dt, pdt, axes.HEAD_DIM, name="q_norm")(q)
            k = RMSNorm(c.rms_norm_eps, dt, pdt, axes.HEAD_DIM, name="k_norm")(k)
        q = apply_rope(q, positions, c)
        k = apply_rope(k, positions, c)
        if kv is not None:
            k = _write_rows(kv[0], k, write_index)
            v = _write_rows(kv[1], v, write_index)
        out = dot_product_attention(q, k.astype(dt), v.astype(dt), mask)
        y = Linear((h, hd), (d,), (axes.HEADS, axes.HEAD_DIM, axes.EMBED), dt, pdt,
                   name="o_proj")(out)
        return y, (k, v)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x):
        c = self.config
        dt, pdt = jnp.dtype(c.dtype), jnp.dtype(c.param_dtype)
        d, f = c.hidden_size, c.intermediate_size
        gate = Linear((d,), (f,), (axes.EMBED, axes.MLP), dt, pdt, name="gate_proj")(x)
        up = Linear((d,), (f,), (axes.EMBED, axes.MLP), dt, pdt, name="up_proj")(x)
        return Linear((f,), (d,), (axes.MLP, axes.EMBED), dt, pdt, name="down_proj")(
            jax.nn.silu(gate) * up)


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then + mlp(norm(.))."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x, positions, mask, kv=None, write_index=None):
        c = self.config
        dt, pdt = jnp.dtype(c.dtype), jnp.dtype(c.param_dtype)
        y, kv = Attention(c, name="self_attn")(
            RMSNorm(c.rms_norm_eps, dt, pdt, name="input_layernorm")(x),
            positions, mask, kv, write_index)
        x = nn.with_logical_constraint(x + y, ACTIVATION_AXES)
        y = MLP(c, name="mlp")(RMSNorm(c.rms_norm_eps, dt, pdt, name="post_attention_layernorm")(x))
        x = nn.with_logical_constraint(x + y, ACTIVATION_AXES)
        return x, kv


class Transformer(nn.Module):
    """Embedding, decoder layers and final norm; the output projection is
    `transformer.compute_logits` (a parameter `lm_head` is created at init
    when embeddings are untied)."""

    config: ModelConfig

    @nn.compact
    def __call__(self, tokens, positions, mask, cache=None, write_index=None):
        """tokens, positions [B, T] int32; mask [B, T, S] bool; cache None or
        ([layers, B, S, K, hd], same) -> (hidden [B, T, D], (ks, vs) per layer)."""
        c = self.config
        dt, pdt = jnp.dtype(c.dtype), jnp.dtype(c.param_dtype)
        embedding = self.param(
            "embed_tokens",
            nn.with_logical_partitioning(_INIT, (axes.VOCAB, axes.EMBED)),
            (c.vocab_size, c.hidden_size),
            pdt,
        )
        if self.is_initializing() and not c.tie_word_embeddings:
            self.param("lm_head", nn.with_logical_partitioning(_INIT, (axes.EMBED, axes.VOCAB)),
                       (c.hidden_size, c.vocab_size), pdt)
        x = jnp.take(embedding, tokens, axis=0).astype(dt)
        x = nn.with_logical_constraint(x, ACTIVATION_AXES)
        ks, vs = [], []
        for i in range(c.num_layers):
            layer_kv = None if cache is None else (cache[0][i], cache[1][i])
            x, (k, v) = DecoderLayer(c, name=f"layers_{i}")(x, positions, mask, layer_kv, write_index)
            ks.append(k)
            vs.append(v)
        x = RMSNorm(c.rms_norm_eps, dt, pdt, name="norm")(x)
        return nn.with_logical_constraint(x, ACTIVATION_AXES), (ks, vs)
