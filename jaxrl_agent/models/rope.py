"""Rotary position embeddings (RoPE) as the Llama/Qwen HF models apply them.

Su et al. 2021, "RoFormer", eq. 34, in the "rotate half" layout of HF
transformers (the two halves of head_dim form the complex pairs), with the
frequency scalings of HF `rope_scaling`: 'default', 'linear' and 'llama3'
(Llama 3.1 report, section 3; HF `_compute_llama3_parameters`).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxrl_agent.models.config import ModelConfig


def inverse_frequencies(config: ModelConfig) -> np.ndarray:
    """[head_dim // 2] float32 inverse frequencies after scaling (numpy, static)."""
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    rope_type = config.rope_type
    scaling = config.rope_scaling or {}
    if rope_type == "linear":
        inv_freq = inv_freq / float(scaling["factor"])
    elif rope_type == "llama3":
        factor = float(scaling["factor"])
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_len = float(scaling.get("original_max_position_embeddings", 8192))
        low_wavelen = old_len / low
        high_wavelen = old_len / high
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv_freq = np.where(medium, smoothed, scaled)
    # HF computes inv_freq in float32 before the outer product with positions.
    return inv_freq.astype(np.float32)


def apply_rope(x, positions, config: ModelConfig):
    """Rotates queries or keys by their positions.

    Args:
        x: [B, T, N, head_dim] queries (N = H) or keys (N = K), any float dtype.
        positions: [B, T] int32 position ids.
        config: supplies head_dim, rope_theta and rope_scaling.

    Returns:
        [B, T, N, head_dim] in x's dtype; the angles are computed in float32.
    """
    inv_freq = jnp.asarray(inverse_frequencies(config))
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, head_dim/2]
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]
    cos = jnp.cos(angles).astype(x.dtype)
    sin = jnp.sin(angles).astype(x.dtype)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin
