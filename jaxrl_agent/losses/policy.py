"""Policy-gradient surrogate losses: PPO (dual-clip, clip-higher), GSPO, CISPO.

All three share one signature, so the learner picks one by name from
`POLICY_LOSSES`:

    loss_fn(logprobs, old_logprobs, advantages, loss_mask, *, clip_low,
            clip_high, is_weights=None, agg_mode, num_tokens=None,
            num_seqs=None, max_len=None) -> (loss, metrics)

`logprobs` [B, T] are the learner's current log pi(a_t | s_t) (differentiated),
`old_logprobs` [B, T] the behaviour policy's (the learner's at rollout time,
treated as constants), `advantages` [B, T] per-token advantages, `loss_mask`
[B, T] bool. Values off the mask are ignored: garbage (even inf/NaN) there
changes neither the loss nor the gradient. `is_weights` [B, T] is an optional
per-token multiplier (e.g. rollout/learner mismatch weights from
`importance.truncated_importance_weights`), always stop-gradient.

Metrics are scalars over THIS batch's masked tokens (not global):
clip fractions, approx KL(old || new) as k3 = E[(r - 1) - log r] and
k2 = 0.5 E[(log r)^2] (Schulman 2020), ratio mean/min/max.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxrl_agent.checks import check_choice, check_scalar, check_shape
from jaxrl_agent.losses.aggregation import (
    aggregate_loss,
    as_float,
    as_mask,
    check_agg_mode,
    masked_max,
    masked_mean,
    masked_min,
)

# Log-ratios are clamped before exp (as verl does) so a stale token cannot
# overflow; exp(20) ~ 5e8 is finite in float32.
LOG_RATIO_CLAMP = 20.0

Metrics = dict[str, jnp.ndarray]


def check_clips(clip_low: Any, clip_high: Any, dual_clip: Any = None, *,
                low_optional: bool = False) -> None:
    """Checks the clip arguments of the policy losses.

    clip_low in [0, 1) (None allowed where low_optional: CISPO's "no lower
    bound"), clip_high >= 0, dual_clip None or > 1; scalars (traced ones are
    checked for shape only).

    Raises:
      ValueError: naming the argument and the expected range.
    """
    if dual_clip is not None:
        check_scalar("dual_clip", dual_clip, low=1.0, low_open=True)
    if clip_low is None and not low_optional:
        raise ValueError("clip_low: expected a value in [0, 1), got None")
    if clip_low is not None:
        check_scalar("clip_low", clip_low, low=0.0, high=1.0, high_open=True)
    if clip_high is None:
        raise ValueError("clip_high: expected a value >= 0, got None")
    check_scalar("clip_high", clip_high, low=0.0)


def _prepare(logprobs, old_logprobs, advantages, loss_mask, is_weights, agg_mode, clip_low, clip_high,
             *, dual_clip=None, low_optional=False):
    """Checks shapes, agg_mode and clips (`check_clips`); returns float arrays
    with off-mask entries zeroed."""
    dims = check_shape("logprobs", logprobs, ("B", "T"))
    check_shape("old_logprobs", old_logprobs, ("B", "T"), dims)
    check_shape("advantages", advantages, ("B", "T"), dims)
    check_shape("loss_mask", loss_mask, ("B", "T"), dims)
    mask = as_mask(loss_mask)
    if is_weights is None:
        weights = jnp.ones(mask.shape, jnp.float32)
    else:
        check_shape("is_weights", is_weights, ("B", "T"), dims)
        weights = jax.lax.stop_gradient(jnp.where(mask, as_float(is_weights), 0.0))
    logp = jnp.where(mask, as_float(logprobs), 0.0)
    old = jax.lax.stop_gradient(jnp.where(mask, as_float(old_logprobs), 0.0))
    adv = jax.lax.stop_gradient(jnp.where(mask, as_float(advantages), 0.0))
    check_agg_mode(agg_mode)
    check_clips(clip_low, clip_high, dual_clip, low_optional=low_optional)
    return logp, old, adv, mask, weights


def _aggregate_clipped(per_token, mask, agg_mode, normalizers, upper, lower, dual=None):
    """Aggregates the weighted per-token loss; returns (loss, the clip-fraction metrics).

    `normalizers` holds num_tokens/num_seqs/max_len for `aggregate_loss`;
    `upper`, `lower` (and `dual`, reported when given) are [B, T] bool.
    """
    loss = aggregate_loss(per_token, mask, agg_mode, **normalizers)
    clipped = upper | lower if dual is None else upper | lower | dual
    metrics = {
        "policy_loss": loss,
        "clipfrac": masked_mean(clipped, mask),
        "clipfrac_upper": masked_mean(upper, mask),
        "clipfrac_lower": masked_mean(lower, mask),
    }
    if dual is not None:
        metrics["clipfrac_dual"] = masked_mean(dual, mask)
    return loss, metrics


def _kl_ratio_metrics(log_ratio: jnp.ndarray, mask: jnp.ndarray) -> Metrics:
    """k3/k2 approx KL(old || new) and token-ratio stats over the mask."""
    log_ratio = jax.lax.stop_gradient(log_ratio)
    ratio = jnp.exp(log_ratio)
    return {
        "approx_kl_k3": masked_mean(ratio - 1.0 - log_ratio, mask),
        "approx_kl_k2": masked_mean(0.5 * jnp.square(log_ratio), mask),
        "ratio_mean": masked_mean(ratio, mask),
        "ratio_min": masked_min(ratio, mask),
        "ratio_max": masked_max(ratio, mask),
    }


def ppo_policy_loss(
    logprobs: Any,
    old_logprobs: Any,
    advantages: Any,
    loss_mask: Any,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    is_weights: Any = None,
    agg_mode: str = "token-mean",
    num_tokens: Any = None,
    num_seqs: Any = None,
    max_len: Any = None,
) -> tuple[jnp.ndarray, Metrics]:
    """PPO clipped surrogate with asymmetric (clip-higher) and dual clipping.

    Per token, with r = exp(logprobs - old_logprobs) and advantage A:

        l = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))
                           (Schulman et al. 2017, PPO, eq. 7, negated)
        l = min(l, -c A)   where A < 0 only (dual clip, Ye et al. 2020,
                           "Mastering Complex Control in MOBA Games", eq. 5)

    then l * is_weights, aggregated by `agg_mode`. clip_high > clip_low is
    DAPO's clip-higher (Yu et al. 2025, eq. 10; e.g. 0.2 / 0.28).

    Args:
      logprobs, old_logprobs, advantages: [B, T] float.
      loss_mask: [B, T] bool.
      clip_low, clip_high: eps_low in [0, 1), eps_high >= 0 (scalars; traced
        values are checked for shape only).
      dual_clip: c > 1 (e.g. 3.0) or None (off).
      is_weights: optional [B, T] float per-token weights (stop-gradient).
      agg_mode, num_tokens, num_seqs, max_len: see `aggregate_loss`.

    Returns:
      (loss float32 scalar, metrics): 'policy_loss', 'clipfrac' (any clip
      active), 'clipfrac_upper' (A > 0, r > 1 + clip_high), 'clipfrac_lower'
      (A < 0, r < 1 - clip_low), 'clipfrac_dual' (A < 0, r > c),
      'approx_kl_k3', 'approx_kl_k2', 'ratio_mean', 'ratio_min', 'ratio_max'.
      The gradient is zero exactly on the clipped tokens, and also where
      |logprobs - old_logprobs| > LOG_RATIO_CLAMP (20; the ratio is clamped
      before exp so a stale token cannot overflow). Those tokens count in
      'clipfrac' only if a clip is active on them.

    Raises:
      ValueError: on bad shapes, unknown agg_mode, clips outside the ranges
        above (or None), c <= 1, or a non-scalar clip.
    """
    logp, old, adv, mask, weights = _prepare(
        logprobs, old_logprobs, advantages, loss_mask, is_weights, agg_mode, clip_low, clip_high,
        dual_clip=dual_clip,
    )
    log_ratio = jnp.clip(logp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = jnp.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = jnp.maximum(unclipped, clipped)
    r = jax.lax.stop_gradient(ratio)
    upper = mask & (adv > 0) & (r > 1.0 + clip_high)
    lower = mask & (adv < 0) & (r < 1.0 - clip_low)
    if dual_clip is None:
        dual = jnp.zeros_like(mask)
    else:
        per_token = jnp.where(adv < 0, jnp.minimum(per_token, -adv * dual_clip), per_token)
        dual = mask & (adv < 0) & (r > dual_clip)
    normalizers = dict(num_tokens=num_tokens, num_seqs=num_seqs, max_len=max_len)
    loss, metrics = _aggregate_clipped(per_token * weights, mask, agg_mode, normalizers, upper, lower, dual)
    return loss, {**metrics, **_kl_ratio_metrics(log_ratio, mask)}


def gspo_policy_loss(
    logprobs: Any,
    old_logprobs: Any,
    advantages: Any,
    loss_mask: Any,
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    is_weights: Any = None,
    agg_mode: str = "seq-mean-token-mean",
    num_tokens: Any = None,
    num_seqs: Any = None,
    max_len: Any = None,
) -> tuple[jnp.ndarray, Metrics]:
    """Group Sequence Policy Optimization, token form (GSPO-token).

    Zheng et al. 2025, "Group Sequence Policy Optimization", eq. 7 (sequence
    ratio) and eq. 13-14 (token form):

        s_i   = exp( 1/|y_i| sum_t (logp_t - old_logp_t) )      over the mask
        s_i,t = sg[s_i] * exp(logp_t - sg[logp_t])              (value s_i)
        l_i,t = max(-A_i,t s_i,t, -A_i,t clip(s_i,t, 1 - clip_low, 1 + clip_high))

    aggregated 'seq-mean-token-mean' by default (the paper's 1/G sum_i 1/|y_i|
    sum_t), which makes the gradient -A_i grad s_i for a sequence-level A_i, as
    in eq. 10. Padding never enters s_i. The paper's clip ranges are ~3e-4/4e-4.

    Args/Raises: as `ppo_policy_loss` (no dual clip).

    Returns:
      (loss, metrics): 'policy_loss', 'clipfrac' (fraction of masked tokens in
      clipped sequences), 'clipfrac_upper', 'clipfrac_lower', token-level
      'approx_kl_k3', 'approx_kl_k2', and 'ratio_mean'/'ratio_min'/'ratio_max'
      of the SEQUENCE ratio s_i over non-empty rows.
    """
    logp, old, adv, mask, weights = _prepare(
        logprobs, old_logprobs, advantages, loss_mask, is_weights, agg_mode, clip_low, clip_high
    )
    token_log_ratio = logp - old  # zero off the mask
    n_b = jnp.maximum(jnp.sum(mask, axis=-1, keepdims=True), 1)
    seq_log_ratio = jnp.sum(token_log_ratio, axis=-1, keepdims=True) / n_b  # [B, 1]
    log_s = jax.lax.stop_gradient(seq_log_ratio) + logp - jax.lax.stop_gradient(logp)
    s = jnp.exp(jnp.clip(log_s, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    per_token = jnp.maximum(-adv * s, -adv * jnp.clip(s, 1.0 - clip_low, 1.0 + clip_high))
    s_val = jax.lax.stop_gradient(s)
    upper = mask & (adv > 0) & (s_val > 1.0 + clip_high)
    lower = mask & (adv < 0) & (s_val < 1.0 - clip_low)
    normalizers = dict(num_tokens=num_tokens, num_seqs=num_seqs, max_len=max_len)
    loss, metrics = _aggregate_clipped(per_token * weights, mask, agg_mode, normalizers, upper, lower)
    nonempty = jnp.any(mask, axis=-1)
    seq_log_ratio = jax.lax.stop_gradient(seq_log_ratio[:, 0])
    seq_ratio = jnp.exp(jnp.clip(seq_log_ratio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    metrics = {
        **metrics,
        **_kl_ratio_metrics(token_log_ratio, mask),
        "ratio_mean": masked_mean(seq_ratio, nonempty),
        "ratio_min": masked_min(seq_ratio, nonempty),
        "ratio_max": masked_max(seq_ratio, nonempty),
    }
    return loss, metrics


def cispo_policy_loss(
    logprobs: Any,
    old_logprobs: Any,
    advantages: Any,
    loss_mask: Any,
    *,
    clip_low: float | None = None,
    clip_high: float = 0.28,
    is_weights: Any = None,
    agg_mode: str = "token-mean",
    num_tokens: Any = None,
    num_seqs: Any = None,
    max_len: Any = None,
) -> tuple[jnp.ndarray, Metrics]:
    """Clipped IS-weight Policy Optimization (CISPO).

    MiniMax 2025, "MiniMax-M1", eq. 4-5:

        r^_t = clip(r_t, 1 - eps_low, 1 + eps_high)      r_t = exp(logp_t - old_logp_t)
        l_t  = -sg[r^_t] A_t logp_t

    aggregated 'token-mean' by default (eq. 4 divides by sum_i |o_i|). Unlike
    PPO, a token whose ratio is clipped still passes gradient -r^_t A_t through
    logp_t; only the weight is clipped. The paper sets no lower bound
    (clip_low=None, the default) and tunes only eps_high (no value published;
    0.28 here). The loss VALUE is not a surrogate of the return (it contains
    logp); only its gradient is meaningful.

    Args/Raises: as `ppo_policy_loss`; clip_low None means no lower bound.

    Returns:
      (loss, metrics): 'policy_loss', 'clipfrac' (weight clipped, either side),
      'clipfrac_upper', 'clipfrac_lower', 'approx_kl_k3', 'approx_kl_k2',
      'ratio_mean', 'ratio_min', 'ratio_max'.
    """
    logp, old, adv, mask, weights = _prepare(  # clip_low None: no lower bound
        logprobs, old_logprobs, advantages, loss_mask, is_weights, agg_mode, clip_low, clip_high,
        low_optional=True,
    )
    log_ratio = jnp.clip(logp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    r = jax.lax.stop_gradient(jnp.exp(log_ratio))
    low = 0.0 if clip_low is None else 1.0 - clip_low
    r_hat = jnp.clip(r, low, 1.0 + clip_high)
    per_token = -r_hat * adv * logp
    upper = mask & (r > 1.0 + clip_high)
    lower = mask & (r < low)
    normalizers = dict(num_tokens=num_tokens, num_seqs=num_seqs, max_len=max_len)
    loss, metrics = _aggregate_clipped(per_token * weights, mask, agg_mode, normalizers, upper, lower)
    return loss, {**metrics, **_kl_ratio_metrics(log_ratio, mask)}


POLICY_LOSSES: dict[str, Callable[..., tuple[jnp.ndarray, Metrics]]] = {
    "ppo": ppo_policy_loss,
    "gspo": gspo_policy_loss,
    "cispo": cispo_policy_loss,
}


def get_policy_loss(name: str) -> Callable[..., tuple[jnp.ndarray, Metrics]]:
    """Returns the policy loss registered as `name` in POLICY_LOSSES.

    Raises:
      ValueError: naming the unknown `name` and listing the valid ones.
    """
    check_choice("policy_loss", name, tuple(POLICY_LOSSES))
    return POLICY_LOSSES[name]
