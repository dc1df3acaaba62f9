"""KL penalties against a reference policy: k1, k2, k3 and friends.

Estimators of KL(pi || pi_ref) from samples of pi (Schulman 2020,
"Approximating KL Divergence", http://joschu.net/blog/kl-approx.html), with
log r = ref_logprobs - logprobs (so r = pi_ref / pi):

    k1  = -log r                  unbiased, high variance, can be negative
    k2  = 0.5 (log r)^2           biased, low variance, >= 0   (alias 'mse')
    k3  = (r - 1) - log r         unbiased, low variance, >= 0 (alias 'low_var_kl')
    abs = |log r|

k3 clamps log r to [-20, 20] before exp and the result to [-10, 10], as verl
does (`kl_penalty_forward`), so a log-ratio of 50 gives a finite value and a
finite gradient. The value clamp is active, and the gradient of k3 is exactly 0,
wherever k3 > 10: log r > ~2.61 (pi_ref / pi > ~13.6) or log r < -11 (pi more
than e^11 times pi_ref). Those are the tokens the penalty should pull on
hardest; use 'k3+' (alias 'low_var_kl+') there: the value of k3 and the
gradient of k2, whose gradient is the unbiased gradient of KL(pi || pi_ref)
(verl's straight-through '+' variants); that gradient, -log r, is not clamped.

Use `kl_penalty` for a per-token penalty in the reward, `kl_loss` as a loss
term (GRPO, Shao et al. 2024, eq. 4, uses k3).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_agent.checks import check_choice, check_shape
from jaxrl_agent.losses.aggregation import (
    aggregate_loss,
    as_float,
    as_mask,
    check_agg_mode,
    masked_mean,
)

KL_KINDS = ("k1", "k2", "k3", "low_var_kl", "mse", "abs", "k3+", "low_var_kl+")
K3_LOG_RATIO_CLAMP = 20.0
K3_VALUE_CLAMP = 10.0


def _k3(log_r: jnp.ndarray) -> jnp.ndarray:
    log_r = jnp.clip(log_r, -K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)
    return jnp.clip(jnp.exp(log_r) - 1.0 - log_r, -K3_VALUE_CLAMP, K3_VALUE_CLAMP)


def kl_penalty(
    logprobs: Any,
    ref_logprobs: Any,
    kind: str = "low_var_kl",
    *,
    loss_mask: Any = None,
) -> jnp.ndarray:
    """Per-token KL(pi || pi_ref) estimate; see the module docstring.

    Args:
      logprobs: [B, T] float, log pi of the sampled tokens (differentiable).
      ref_logprobs: [B, T] float, log pi_ref of the same tokens (constants).
      kind: one of KL_KINDS.
      loss_mask: optional [B, T] bool; off-mask entries are 0 (and inf/NaN
        there do not leak into values or gradients).

    Returns:
      [B, T] float32 per-token penalty, in nats.

    Raises:
      ValueError: on mismatched shapes, wrong rank or unknown `kind`.
    """
    dims = check_shape("logprobs", logprobs, ("B", "T"))
    check_shape("ref_logprobs", ref_logprobs, ("B", "T"), dims)
    check_choice("kind", kind, KL_KINDS)
    logp = as_float(logprobs)
    ref = jax.lax.stop_gradient(as_float(ref_logprobs))
    if loss_mask is not None:
        check_shape("loss_mask", loss_mask, ("B", "T"), dims)
        mask = as_mask(loss_mask)
        logp = jnp.where(mask, logp, 0.0)
        ref = jnp.where(mask, ref, 0.0)
    log_r = ref - logp
    if kind == "k1":
        return -log_r
    if kind == "abs":
        return jnp.abs(log_r)
    if kind in ("k2", "mse"):
        return 0.5 * jnp.square(log_r)
    if kind in ("k3", "low_var_kl"):
        return _k3(log_r)
    k2 = 0.5 * jnp.square(log_r)  # 'k3+': value of k3, gradient of k2
    return k2 - jax.lax.stop_gradient(k2) + jax.lax.stop_gradient(_k3(log_r))


def kl_loss(
    logprobs: Any,
    ref_logprobs: Any,
    loss_mask: Any,
    *,
    kind: str = "low_var_kl",
    agg_mode: str = "token-mean",
    num_tokens: Any = None,
    num_seqs: Any = None,
    max_len: Any = None,
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """KL(pi || pi_ref) loss term: `kl_penalty` aggregated over the mask.

    Args:
      logprobs, ref_logprobs: [B, T] float.
      loss_mask: [B, T] bool.
      kind: one of KL_KINDS.
      agg_mode, num_tokens, num_seqs, max_len: see `aggregate_loss`.

    Returns:
      (loss float32 scalar, {'kl_loss': loss, 'kl': token-mean of the penalty
      over this batch's mask}); multiply by the KL coefficient beta yourself.

    Raises:
      ValueError: on bad shapes, unknown `kind` or `agg_mode`.
    """
    check_agg_mode(agg_mode)
    per_token = kl_penalty(logprobs, ref_logprobs, kind, loss_mask=loss_mask)
    mask = as_mask(loss_mask)
    loss = aggregate_loss(
        per_token, mask, agg_mode, num_tokens=num_tokens, num_seqs=num_seqs, max_len=max_len
    )
    return loss, {"kl_loss": loss, "kl": masked_mean(jax.lax.stop_gradient(per_token), mask)}
