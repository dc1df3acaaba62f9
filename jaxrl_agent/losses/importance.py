"""Rollout/learner mismatch correction: truncated and masked importance weights.

The inference engine (SGLang, the embedded engine, bf16 kernels) and the
learner compute slightly different probabilities for the same tokens, so
"on-policy" samples are off-policy for the learner. With
rho = pi_old(learner) / pi_rollout(engine) = exp(old_logprobs - rollout_logprobs):

  TIS   w = min(rho, cap)                            Yao et al. 2025, "Your
        Efficient RL Framework Secretly Brings You Off-Policy RL Training"
  MIS   w = rho 1[low <= rho <= high]  (or just the indicator)
        Liu et al. 2025, "When Speed Kills Stability: Demystifying RL Collapse
        from the Training-Inference Mismatch"; verl `rollout_is` mode 'mask'

rho is taken per token ('token'), per sequence as the product of token ratios
('sequence', exp of the masked sum of log-ratios) or as their geometric mean
('geometric', exp of the masked mean). Sequence-level weights are broadcast to
the row's masked tokens. Weights are stop-gradient, 0 off the mask, and are
passed to the policy losses as `is_weights`.

Metrics (over this batch; ratio stats over the weighting units, i.e. masked
tokens or non-empty rows): 'is_ratio_mean', 'is_ratio_min', 'is_ratio_max',
'is_frac_capped' (TIS: rho > cap), 'is_frac_masked' (MIS: rho outside
[low, high]), and the token-level mismatch KL(pi_rollout || pi_old) as
'mismatch_kl_k3' = E[rho - 1 - log rho] (log rho clamped to [-20, 20], as the
weights) and 'mismatch_kl_k1' = E[-log rho] (unclamped).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_agent.checks import check_choice, check_scalar, check_shape, static_value
from jaxrl_agent.losses.aggregation import (
    as_float,
    as_mask,
    masked_max,
    masked_mean,
    masked_min,
)

IS_LEVELS = ("token", "sequence", "geometric")
LOG_RATIO_CLAMP = 20.0


def _unit_ratio(old_logprobs, rollout_logprobs, loss_mask, level):
    """Returns (rho per unit, unit mask, token log-ratio [B, T], token mask)."""
    dims = check_shape("old_logprobs", old_logprobs, ("B", "T"))
    check_shape("rollout_logprobs", rollout_logprobs, ("B", "T"), dims)
    check_shape("loss_mask", loss_mask, ("B", "T"), dims)
    check_choice("level", level, IS_LEVELS)
    mask = as_mask(loss_mask)
    log_rho = jnp.where(mask, as_float(old_logprobs) - as_float(rollout_logprobs), 0.0)
    log_rho = jax.lax.stop_gradient(log_rho)
    if level == "token":
        unit_log, unit_mask = log_rho, mask
    else:
        unit_log = jnp.sum(log_rho, axis=-1)
        if level == "geometric":
            unit_log = unit_log / jnp.maximum(jnp.sum(mask, axis=-1), 1)
        unit_mask = jnp.any(mask, axis=-1)
    rho = jnp.exp(jnp.clip(unit_log, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return rho, unit_mask, log_rho, mask


def _to_tokens(unit_values: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
    """Broadcasts per-unit values to [B, T] and zeroes them off the mask."""
    if unit_values.ndim == 1:
        unit_values = unit_values[:, None]
    return jnp.where(mask, jnp.broadcast_to(unit_values, mask.shape), 0.0)


def _metrics(rho, unit_mask, log_rho, mask) -> dict[str, jnp.ndarray]:
    clipped = jnp.clip(log_rho, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # k3 from one clamped log rho
    tok_rho = jnp.exp(clipped)
    return {
        "is_ratio_mean": masked_mean(rho, unit_mask),
        "is_ratio_min": masked_min(rho, unit_mask),
        "is_ratio_max": masked_max(rho, unit_mask),
        "mismatch_kl_k3": masked_mean(tok_rho - 1.0 - clipped, mask),
        "mismatch_kl_k1": masked_mean(-log_rho, mask),
    }


def truncated_importance_weights(
    old_logprobs: Any,
    rollout_logprobs: Any,
    loss_mask: Any,
    *,
    cap: float = 2.0,
    level: str = "token",
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """Truncated importance sampling (TIS) weights w = min(rho, cap).

    Args:
      old_logprobs: [B, T] float, the learner's logprobs of the rollout tokens
        (computed before the update, i.e. pi_old).
      rollout_logprobs: [B, T] float, the engine's logprobs of the same tokens.
      loss_mask: [B, T] bool.
      cap: C > 0 (Yao et al. use 2).
      level: 'token', 'sequence' or 'geometric'.

    Returns:
      (weights [B, T] float32, stop-gradient, 0 off the mask; metrics, see the
      module docstring; 'is_frac_capped' is the fraction of units with rho > C).

    Raises:
      ValueError: on bad shapes, unknown `level` or cap <= 0.
    """
    check_scalar("cap", cap, low=0.0, low_open=True)
    rho, unit_mask, log_rho, mask = _unit_ratio(old_logprobs, rollout_logprobs, loss_mask, level)
    weights = jax.lax.stop_gradient(_to_tokens(jnp.minimum(rho, cap), mask))
    metrics = _metrics(rho, unit_mask, log_rho, mask)
    metrics["is_frac_capped"] = masked_mean(rho > cap, unit_mask)
    return weights, metrics


def masked_importance_weights(
    old_logprobs: Any,
    rollout_logprobs: Any,
    loss_mask: Any,
    *,
    low: float = 0.5,
    high: float = 2.0,
    level: str = "token",
    apply_ratio: bool = True,
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """Masked importance sampling (MIS): drop units with rho outside [low, high].

    w = rho 1[low <= rho <= high] if apply_ratio, else 1[low <= rho <= high]
    (pure rejection). A dropped sequence (level 'sequence'/'geometric') has
    weight 0 on all its tokens.

    Args:
      old_logprobs, rollout_logprobs, loss_mask: as `truncated_importance_weights`.
      low, high: 0 <= low < high.
      level: 'token', 'sequence' or 'geometric'.
      apply_ratio: multiply the kept units by rho (default) or by 1.

    Returns:
      (weights [B, T] float32, stop-gradient, 0 off the mask and on dropped
      units; metrics, see the module docstring).

    Raises:
      ValueError: on bad shapes, unknown `level` or bounds not 0 <= low < high.
    """
    check_scalar("low", low, low=0.0)
    check_scalar("high", high, low=0.0)
    lo, hi = static_value(low), static_value(high)
    if lo is not None and hi is not None and not lo < hi:
        raise ValueError(f"low, high: expected 0 <= low < high, got low={low!r}, high={high!r}")
    rho, unit_mask, log_rho, mask = _unit_ratio(old_logprobs, rollout_logprobs, loss_mask, level)
    keep = (rho >= low) & (rho <= high)
    unit_w = jnp.where(keep, rho if apply_ratio else 1.0, 0.0)
    weights = jax.lax.stop_gradient(_to_tokens(unit_w, mask))
    metrics = _metrics(rho, unit_mask, log_rho, mask)
    metrics["is_frac_masked"] = masked_mean(~keep, unit_mask)
    return weights, metrics
