"""make_train_step / make_compute_advantages: the jitted, sharded learner steps.

One call of train_step runs `ppo_epochs` passes over the batch; each pass
shuffles the rows with the state rng and makes `num_minibatches` optimizer
updates (lax.scan); each update accumulates gradients over
`num_microbatches` chunks (lax.scan). Loss normalizers (token/sequence
counts) are computed over the whole minibatch before it is chunked, so
micro-batching changes memory use, never the update.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxrl_agent import losses
from jaxrl_agent.learner import sharding as sharding_lib
from jaxrl_agent.learner.hparams import LearnerHParams
from jaxrl_agent.learner.loss import learner_loss
from jaxrl_agent.learner.mesh import BATCH_AXES, check_batch_divisible, single_device_mesh
from jaxrl_agent.learner.optimizer import make_schedule
from jaxrl_agent.learner.prepare import TrainBatch, compute_advantages
from jaxrl_agent.learner.train_state import TrainState, make_optimizers, state_shardings
from jaxrl_agent.models.config import ModelConfig

# Metrics that are sums of per-micro-batch shares (global normalizers); the
# others are per-micro-batch statistics and are averaged.
ADDITIVE_METRICS = ("loss", "pg_loss", "kl_loss", "entropy_loss", "value_loss")


def _split_rows(tree: Any, n: int) -> Any:
    return jax.tree.map(lambda x: x.reshape(n, x.shape[0] // n, *x.shape[1:]), tree)


def minibatch_grads(
    params: Any,
    value_params: Any,
    tb: TrainBatch,
    kl_coef: jnp.ndarray,
    *,
    config: ModelConfig,
    hp: LearnerHParams,
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray], tuple[Any, Any]]:
    """Loss, metrics and (policy, critic) gradients of one minibatch.

    Gradients are accumulated over hp.num_microbatches row chunks; each chunk's
    loss uses the normalizers of the whole minibatch, so the sum equals the
    loss of the minibatch in one piece (up to float rounding).

    Returns:
      (loss [] float32, metrics dict of [] float32, (grads, value_grads)).
    """
    normalizers = losses.global_normalizers(tb.batch.loss_mask)
    grad_fn = jax.value_and_grad(learner_loss, argnums=(0, 1), has_aux=True)
    kw = dict(config=config, hp=hp)
    n = hp.num_microbatches
    if n == 1:
        (loss, metrics), grads = grad_fn(params, value_params, tb, normalizers, kl_coef, **kw)
        return loss, metrics, grads

    def body(acc, micro):
        (loss, metrics), grads = grad_fn(params, value_params, micro, normalizers, kl_coef, **kw)
        return jax.tree.map(jnp.add, acc, grads), (loss, metrics)

    zeros = jax.tree.map(jnp.zeros_like, (params, value_params))
    grads, (loss, metrics) = jax.lax.scan(body, zeros, _split_rows(tb, n))
    metrics = {
        k: jnp.sum(v) if k in ADDITIVE_METRICS else jnp.mean(v) for k, v in metrics.items()
    }
    return jnp.sum(loss), metrics, grads


def train_step_fn(
    config: ModelConfig, hp: LearnerHParams, *, data_parallel_size: int = 1
) -> Callable[[TrainState, TrainBatch], tuple[TrainState, dict[str, jnp.ndarray]]]:
    """The pure (unjitted) train_step(state, train_batch) -> (state, metrics).

    Raises (at trace time):
      ValueError: batch size not divisible by num_minibatches * num_microbatches
        or by the data-parallel size (naming the numbers).
    """
    policy_tx, value_tx = make_optimizers(hp)
    sched = dict(warmup_steps=hp.warmup_steps, total_steps=hp.total_steps,
                 schedule=hp.schedule, end_lr_ratio=hp.end_lr_ratio)
    lr_schedule = make_schedule(lr=hp.lr, **sched)
    controller = hp.kl_controller()
    num_mb = hp.num_minibatches

    def update(carry, tb):
        params, opt_state, value_params, value_opt_state, count, kl_coef = carry
        loss, metrics, (grads, value_grads) = minibatch_grads(
            params, value_params, tb, kl_coef, config=config, hp=hp
        )
        updates, opt_state = policy_tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        metrics.update(grad_norm=optax.tree.norm(grads), lr=lr_schedule(count))
        if value_params is not None:
            v_updates, value_opt_state = value_tx.update(value_grads, value_opt_state, value_params)
            value_params = optax.apply_updates(value_params, v_updates)
            metrics["value_grad_norm"] = optax.tree.norm(value_grads)
        return (params, opt_state, value_params, value_opt_state, count + 1, kl_coef), metrics

    def train_step(state: TrainState, tb: TrainBatch):
        b = int(tb.batch.tokens.shape[0])
        chunks = hp.num_minibatches * hp.num_microbatches
        if b % chunks:
            raise ValueError(
                f"batch_size: {b} rows are not divisible by num_minibatches * "
                f"num_microbatches = {hp.num_minibatches} * {hp.num_microbatches}"
            )
        if b % data_parallel_size:
            raise ValueError(
                f"batch_size: {b} is not divisible by the data-parallel size {data_parallel_size}"
            )

        def epoch(carry, key):
            rows = tb
            if hp.shuffle:
                perm = jax.random.permutation(key, b)
                rows = jax.tree.map(lambda x: jnp.take(x, perm, axis=0), tb)
            return jax.lax.scan(update, carry, _split_rows(rows, num_mb))

        key, *epoch_keys = jax.random.split(jax.random.wrap_key_data(state.rng), hp.ppo_epochs + 1)
        count = state.step * hp.updates_per_step
        carry = (state.params, state.opt_state, state.value_params, state.value_opt_state,
                 count, state.kl_state.coef)
        carry, metrics = jax.lax.scan(epoch, carry, jnp.stack(epoch_keys))
        params, opt_state, value_params, value_opt_state, _, _ = carry
        metrics = {k: jnp.mean(v) for k, v in metrics.items()}
        kl_state = state.kl_state
        if "kl" in metrics:
            n_real = jnp.sum(tb.batch.episode_mask.astype(jnp.float32))
            kl_state = controller.update(kl_state, metrics["kl"], n_real)
        new_state = TrainState(
            params=params, opt_state=opt_state, step=state.step + 1,
            rng=jax.random.key_data(key), kl_state=kl_state,
            value_params=value_params, value_opt_state=value_opt_state,
        )
        return new_state, metrics

    return train_step


def make_train_step(
    config: ModelConfig,
    hp: LearnerHParams,
    *,
    mesh: jax.sharding.Mesh | None = None,
    rules=sharding_lib.LOGICAL_AXIS_RULES,
    donate: bool = True,
):
    """Jitted train_step(state, train_batch) -> (state, metrics) on `mesh`.

    State in/out shardings come from the rule table (parameters and optimizer
    moments by logical axes; scalars replicated); every TrainBatch array is
    split by rows over ('data', 'fsdp'); metrics are replicated. The state
    argument is donated (its buffers are reused for the new state: do not use
    the old state after the call).

    Args:
      config: the model; hp: LearnerHParams.
      mesh: device mesh (default: a 1-device mesh).
      rules: logical -> mesh axis rules.
      donate: donate the state buffers.

    Returns:
      A `jax.jit`-wrapped function; it compiles once per batch shape (B, T, S).
    """
    mesh = single_device_mesh() if mesh is None else mesh
    dp = 1
    for a in BATCH_AXES:
        dp *= mesh.shape[a]
    st_sh = state_shardings(config, hp, mesh, rules)
    rows = NamedSharding(mesh, P(BATCH_AXES))
    return jax.jit(
        train_step_fn(config, hp, data_parallel_size=dp),
        in_shardings=(st_sh, rows),
        out_shardings=(st_sh, sharding_lib.replicated(mesh)),
        donate_argnums=(0,) if donate else (),
    )


def make_compute_advantages(
    config: ModelConfig,
    hp: LearnerHParams,
    *,
    mesh: jax.sharding.Mesh | None = None,
    rules=sharding_lib.LOGICAL_AXIS_RULES,
):
    """Jitted compute_advantages(state, batch, ref_params=None) -> TrainBatch.

    The returned TrainBatch is split by rows over ('data', 'fsdp'), ready for
    train_step. ref_params must carry the policy's parameter layout.

    Raises:
      ValueError: (on call) the batch is not divisible by the data-parallel size,
        or see prepare.compute_advantages.
    """
    mesh = single_device_mesh() if mesh is None else mesh
    st_sh = state_shardings(config, hp, mesh, rules)
    rows = NamedSharding(mesh, P(BATCH_AXES))
    fn = jax.jit(
        lambda state, batch, ref_params: compute_advantages(
            state, batch, config=config, hp=hp, ref_params=ref_params
        ),
        in_shardings=(st_sh, rows, st_sh.params if hp.use_kl else None),
        out_shardings=rows,
    )

    def call(state: TrainState, batch, ref_params: Any = None) -> TrainBatch:
        check_batch_divisible(int(batch.tokens.shape[0]), mesh)
        return fn(state, batch, ref_params)

    return call
