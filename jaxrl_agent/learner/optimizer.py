"""AdamW with warmup + cosine/constant schedule, global-norm clipping, masks.

Built from optax pieces only. Frozen parameters (e.g. embeddings) go through
`optax.multi_transform` to `optax.set_to_zero()`: they get no update, no
optimizer moments, and do not count toward the clipping norm.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import optax

from jaxrl_agent.checks import check_choice, check_positive

SCHEDULES = ("cosine", "constant")


def make_schedule(
    *,
    lr: float,
    warmup_steps: int = 0,
    total_steps: int | None = None,
    schedule: str = "cosine",
    end_lr_ratio: float = 0.0,
) -> optax.Schedule:
    """Learning rate per optimizer step: linear warmup 0 -> lr, then cosine/constant.

    Args:
      lr: peak learning rate (> 0).
      warmup_steps: number of linear-warmup steps (>= 0).
      total_steps: total optimizer steps including warmup; required for cosine.
      schedule: 'cosine' (decay to lr * end_lr_ratio at total_steps) or 'constant'.
      end_lr_ratio: final lr as a fraction of lr (cosine only).

    Raises:
      ValueError: unknown schedule, lr <= 0, negative warmup, or cosine
        without total_steps > warmup_steps.
    """
    check_choice("schedule", schedule, SCHEDULES)
    check_positive("lr", lr)
    check_positive("warmup_steps", warmup_steps, allow_zero=True)
    if schedule == "constant":
        after = optax.constant_schedule(lr)
    else:
        if total_steps is None or total_steps <= warmup_steps:
            raise ValueError(
                f"total_steps: cosine schedule needs total_steps > warmup_steps="
                f"{warmup_steps}, got {total_steps}"
            )
        after = optax.cosine_decay_schedule(lr, total_steps - warmup_steps, alpha=end_lr_ratio)
    if warmup_steps == 0:
        return after
    warmup = optax.linear_schedule(0.0, lr, warmup_steps)
    return optax.join_schedules([warmup, after], [warmup_steps])


def default_weight_decay_mask(params: Any) -> Any:
    """True on matrices (ndim >= 2); norms' scales and biases get no decay."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(
    *,
    lr: float,
    warmup_steps: int = 0,
    total_steps: int | None = None,
    schedule: str = "cosine",
    end_lr_ratio: float = 0.0,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    max_grad_norm: float | None = 1.0,
    trainable_mask: Any | Callable[[Any], Any] | None = None,
) -> optax.GradientTransformation:
    """AdamW with global-norm clipping and an optional trainable mask.

    Args:
      lr, warmup_steps, total_steps, schedule, end_lr_ratio: see make_schedule.
      b1, b2, eps, weight_decay: AdamW (Loshchilov & Hutter 2019); decay applies
        to matrices only (default_weight_decay_mask).
      max_grad_norm: clip the global gradient norm of the trainable parameters
        to this value; None disables.
      trainable_mask: bool tree (or a function params -> bool tree); False
        leaves are frozen. None trains everything.

    Returns:
      An optax GradientTransformation; `optax.inject_hyperparams` is not used,
      the lr is read back with `make_schedule` at the state's step.
    """
    sched = make_schedule(
        lr=lr, warmup_steps=warmup_steps, total_steps=total_steps,
        schedule=schedule, end_lr_ratio=end_lr_ratio,
    )
    parts = []
    if max_grad_norm is not None:
        check_positive("max_grad_norm", max_grad_norm)
        parts.append(optax.clip_by_global_norm(max_grad_norm))
    parts.append(
        optax.adamw(sched, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                    mask=default_weight_decay_mask)
    )
    tx = optax.chain(*parts)
    if trainable_mask is None:
        return tx

    def labels(params):
        mask = trainable_mask(params) if callable(trainable_mask) else trainable_mask
        return jax.tree.map(lambda m: "train" if m else "frozen", mask)

    return optax.multi_transform({"train": tx, "frozen": optax.set_to_zero()}, labels)


def freeze_by_name(*names: str) -> Callable[[Any], Any]:
    """A trainable_mask function freezing every leaf whose path contains a name.

    Example: `freeze_by_name('embed')` freezes the token embedding table.
    """

    def mask(params):
        def keep(path, _):
            path_str = jax.tree_util.keystr(path)
            return not any(n in path_str for n in names)

        return jax.tree_util.tree_map_with_path(keep, params)

    return mask
