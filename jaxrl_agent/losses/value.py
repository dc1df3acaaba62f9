"""Clipped value (critic) loss, PPO2 style."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_agent.checks import check_scalar, check_shape
from jaxrl_agent.losses.aggregation import (
    aggregate_loss,
    as_float,
    as_mask,
    check_agg_mode,
    masked_mean,
)


def value_loss(
    values: Any,
    old_values: Any,
    returns: Any,
    loss_mask: Any,
    *,
    clip_range: float | None = 0.2,
    agg_mode: str = "token-mean",
    num_tokens: Any = None,
    num_seqs: Any = None,
    max_len: Any = None,
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """Clipped value loss.

        v_clip = old_v + clip(v - old_v, -clip_range, clip_range)
        l      = 0.5 max((v - R)^2, (v_clip - R)^2)

    (OpenAI baselines ppo2 `model.py`; Engstrom et al. 2020, "Implementation
    Matters in Deep RL", sec. 3, "value function clipping".) clip_range None
    gives the plain 0.5 (v - R)^2.

    Args:
      values: [B, T] float, current critic predictions (differentiated).
      old_values: [B, T] float, predictions at rollout time (constants).
      returns: [B, T] float, regression targets R (constants).
      loss_mask: [B, T] bool; off-mask values are ignored.
      clip_range: eps >= 0, in value units, or None.
      agg_mode, num_tokens, num_seqs, max_len: see `aggregate_loss`.

    Returns:
      (loss float32 scalar, metrics over this batch's mask): 'value_loss',
      'vf_clipfrac' (fraction of tokens where the clipped term is larger, so
      the gradient is zero), 'explained_variance' = 1 - Var[R - v] / Var[R]
      (0 when Var[R] = 0 or the mask is empty), 'value_mean', 'returns_mean'.

    Raises:
      ValueError: on bad shapes, unknown agg_mode or a negative clip_range.
    """
    dims = check_shape("values", values, ("B", "T"))
    check_shape("old_values", old_values, ("B", "T"), dims)
    check_shape("returns", returns, ("B", "T"), dims)
    check_shape("loss_mask", loss_mask, ("B", "T"), dims)
    check_agg_mode(agg_mode)
    if clip_range is not None:
        check_scalar("clip_range", clip_range, low=0.0)
    mask = as_mask(loss_mask)
    v = jnp.where(mask, as_float(values), 0.0)
    old_v = jax.lax.stop_gradient(jnp.where(mask, as_float(old_values), 0.0))
    ret = jax.lax.stop_gradient(jnp.where(mask, as_float(returns), 0.0))
    unclipped = jnp.square(v - ret)
    if clip_range is None:
        per_token = 0.5 * unclipped
        clipfrac = jnp.zeros((), jnp.float32)
    else:
        v_clip = old_v + jnp.clip(v - old_v, -clip_range, clip_range)
        clipped = jnp.square(v_clip - ret)
        per_token = 0.5 * jnp.maximum(unclipped, clipped)
        clipfrac = masked_mean(jax.lax.stop_gradient(clipped > unclipped), mask)
    loss = aggregate_loss(
        per_token, mask, agg_mode, num_tokens=num_tokens, num_seqs=num_seqs, max_len=max_len
    )
    v_sg = jax.lax.stop_gradient(v)
    var_ret = masked_mean(jnp.square(ret - masked_mean(ret, mask)), mask)
    resid = ret - v_sg
    var_resid = masked_mean(jnp.square(resid - masked_mean(resid, mask)), mask)
    explained = jnp.where(var_ret > 0, 1.0 - var_resid / jnp.where(var_ret > 0, var_ret, 1.0), 0.0)
    return loss, {
        "value_loss": loss,
        "vf_clipfrac": clipfrac,
        "explained_variance": explained,
        "value_mean": masked_mean(v_sg, mask),
        "returns_mean": masked_mean(ret, mask),
    }
