"""Policy entropy from logits, and the masked entropy bonus."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_agent.checks import check_shape
from jaxrl_agent.losses.aggregation import (
    aggregate_loss,
    as_float,
    as_mask,
    check_agg_mode,
    masked_mean,
)


def entropy_from_logits(logits: Any) -> jnp.ndarray:
    """Entropy of softmax(logits) over the last axis.

        H = -sum_v p_v log p_v,   log p = logits - logsumexp(logits)

    Computed from log_softmax (a stable logsumexp), so large logits do not
    overflow; entries with logit -inf (p = 0, e.g. a masked vocabulary)
    contribute 0 to the value and to the gradient instead of 0 * inf = NaN.

    Args:
      logits: [B, T, V] float (any float dtype; computed in >= float32).

    Returns:
      [B, T] float32 entropy in nats.

    Raises:
      ValueError: if `logits` is not rank 3.
    """
    check_shape("logits", logits, ("B", "T", "V"))
    logp = jax.nn.log_softmax(as_float(logits), axis=-1)
    finite = jnp.isfinite(logp)
    logp_safe = jnp.where(finite, logp, 0.0)
    p = jnp.where(finite, jnp.exp(logp_safe), 0.0)
    return -jnp.sum(p * logp_safe, axis=-1)


def entropy_loss(
    logits: Any,
    loss_mask: Any,
    *,
    agg_mode: str = "token-mean",
    num_tokens: Any = None,
    num_seqs: Any = None,
    max_len: Any = None,
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """Entropy bonus as a loss to minimize: -aggregate(H, loss_mask).

    As rlax.entropy_loss, the loss is the NEGATIVE entropy, so adding
    `entropy_coef * loss` to the objective raises entropy. Padding positions
    (loss_mask false) are ignored: their logits are replaced by 0 before the
    softmax, so any value there (even inf/NaN) changes neither the loss nor
    the gradient.

    Args:
      logits: [B, T, V] float.
      loss_mask: [B, T] bool.
      agg_mode, num_tokens, num_seqs, max_len: see `aggregate_loss`.

    Returns:
      (loss float32 scalar, {'entropy_loss': loss, 'entropy': token-mean
      entropy over this batch's mask, in nats}).

    Raises:
      ValueError: on bad shapes (logits [B, T, V] vs loss_mask [B, T]) or
      unknown `agg_mode`.
    """
    dims = check_shape("logits", logits, ("B", "T", "V"))
    check_shape("loss_mask", loss_mask, ("B", "T"), dims)
    check_agg_mode(agg_mode)
    mask = as_mask(loss_mask)
    entropy = entropy_from_logits(jnp.where(mask[..., None], as_float(logits), 0.0))
    aggregated = aggregate_loss(
        entropy, mask, agg_mode, num_tokens=num_tokens, num_seqs=num_seqs, max_len=max_len
    )
    loss = -aggregated
    return loss, {
        "entropy_loss": loss,
        "entropy": masked_mean(jax.lax.stop_gradient(entropy), mask),
    }
