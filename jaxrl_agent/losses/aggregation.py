"""Loss aggregation over a padded [B, T] batch, with global normalizers.

A per-token loss `l[b, t]` is reduced to a scalar under `loss_mask` in one of
four ways (verl's `agg_loss` modes; Dr. GRPO, Liu et al. 2025, sec. 3.1):

    token-mean               sum_{b,t} m l / N                 N = masked tokens
    seq-mean-token-sum       sum_b (sum_t m l) / S             S = sequences
    seq-mean-token-mean      sum_b (sum_t m l / n_b) / S       n_b = tokens of row b
    seq-mean-token-sum-norm  sum_b (sum_t m l / L) / S         L = constant max_len

Every mode is *linear in the rows* once N, S and L are fixed. They are
therefore arguments (`num_tokens`, `num_seqs`, `max_len`): compute them once
from the full batch with `global_normalizers` and pass them to every
micro-batch, and the sum of the micro-batch losses (and gradients) equals the
full-batch loss (and gradient) exactly, up to float summation order. Under data
parallelism with globally sharded arrays this is automatic; with per-device
(shard_map/pmap) losses, pass the global normalizers and psum (not pmean) the
gradients. The defaults are this batch's own normalizers.

S counts the rows with at least one masked token: padding rows (all-false
mask) neither add to the loss nor dilute the mean, and never produce NaN.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jaxrl_agent.checks import check_choice, check_shape

AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def as_float(x: Any) -> jnp.ndarray:
    """Returns `x` as a float array of at least float32 precision."""
    x = jnp.asarray(x)
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def as_mask(loss_mask: Any) -> jnp.ndarray:
    """Returns `loss_mask` as a bool array (nonzero is true)."""
    loss_mask = jnp.asarray(loss_mask)
    return loss_mask if loss_mask.dtype == jnp.bool_ else loss_mask != 0


def masked_mean(x: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
    """Mean of `x` where `mask` is true; 0 when the mask is empty."""
    total = jnp.sum(jnp.where(mask, x, 0.0))
    return total / jnp.maximum(jnp.sum(mask), 1)


def masked_min(x: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
    """Minimum of `x` where `mask` is true; 0 when the mask is empty."""
    out = jnp.min(jnp.where(mask, x, jnp.inf))
    return jnp.where(jnp.any(mask), out, 0.0)


def masked_max(x: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
    """Maximum of `x` where `mask` is true; 0 when the mask is empty."""
    out = jnp.max(jnp.where(mask, x, -jnp.inf))
    return jnp.where(jnp.any(mask), out, 0.0)


def check_agg_mode(agg_mode: str) -> None:
    """Raises ValueError naming `agg_mode` unless it is one of AGG_MODES."""
    check_choice("agg_mode", agg_mode, AGG_MODES)


def global_normalizers(loss_mask: Any) -> dict[str, Any]:
    """Normalizers of the full batch, to pass to every micro-batch's loss.

    Args:
      loss_mask: [B, T] bool (or 0/1) mask of the FULL batch.

    Returns:
      {'num_tokens': int32 scalar, total masked tokens N;
       'num_seqs': int32 scalar, rows with at least one masked token S;
       'max_len': int, the padded length T (Dr. GRPO's constant L)}.
      The keys are the keyword names of `aggregate_loss` and of every loss in
      this package, so `loss_fn(..., **global_normalizers(mask))` works.

    Raises:
      ValueError: if `loss_mask` is not rank 2.
    """
    check_shape("loss_mask", loss_mask, ("B", "T"))
    mask = as_mask(loss_mask)
    return {
        "num_tokens": jnp.sum(mask, dtype=jnp.int32),
        "num_seqs": jnp.sum(jnp.any(mask, axis=-1), dtype=jnp.int32),
        "max_len": int(mask.shape[-1]),
    }


def aggregate_loss(
    loss_per_token: Any,
    loss_mask: Any,
    mode: str = "token-mean",
    *,
    num_tokens: Any = None,
    num_seqs: Any = None,
    max_len: Any = None,
) -> jnp.ndarray:
    """Reduces a per-token loss to a scalar under a mask.

    See the module docstring for the four equations. Sources: token-mean and
    seq-mean-token-mean as in DAPO (Yu et al. 2025, eq. 8 vs. GRPO eq. 5);
    seq-mean-token-sum-norm is Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-
    Like Training", sec. 3.1): the per-sequence 1/|o_i| is replaced by a
    constant 1/L. (verl's variant of that mode omits the 1/S; it differs only by
    a constant factor.)

    Args:
      loss_per_token: [B, T] float per-token loss; values on masked-out
        positions are ignored (even inf/NaN do not leak into value or gradient).
      loss_mask: [B, T] bool, true on tokens that count.
      mode: one of AGG_MODES.
      num_tokens: scalar N, the masked-token count of the full batch
        ('token-mean'); default: this batch's count.
      num_seqs: scalar S, the number of non-empty rows of the full batch
        (the 'seq-mean-*' modes); default: this batch's count.
      max_len: scalar L ('seq-mean-token-sum-norm'); default: T.

    Returns:
      A float32 scalar. An all-false mask gives 0 (normalizers are floored at 1).

    Raises:
      ValueError: on a rank other than 2, mismatched shapes, or unknown `mode`.
    """
    dims = check_shape("loss_per_token", loss_per_token, ("B", "T"))
    check_shape("loss_mask", loss_mask, ("B", "T"), dims)
    check_agg_mode(mode)
    mask = as_mask(loss_mask)
    loss = jnp.where(mask, as_float(loss_per_token), 0.0)
    seq_sum = jnp.sum(loss, axis=-1)  # [B]
    if mode == "token-mean":
        n = jnp.sum(mask) if num_tokens is None else num_tokens
        return jnp.sum(seq_sum) / jnp.maximum(as_float(n), 1.0)
    s = jnp.sum(jnp.any(mask, axis=-1)) if num_seqs is None else num_seqs
    s = jnp.maximum(as_float(s), 1.0)
    if mode == "seq-mean-token-sum":
        return jnp.sum(seq_sum) / s
    if mode == "seq-mean-token-mean":
        n_b = jnp.maximum(jnp.sum(mask, axis=-1), 1).astype(seq_sum.dtype)
        return jnp.sum(seq_sum / n_b) / s
    length = mask.shape[-1] if max_len is None else max_len
    return jnp.sum(seq_sum) / jnp.maximum(as_float(length), 1.0) / s
