"""TrainState: the learner's whole mutable state as one pytree, and its shardings.

Reference policy: the reference logprobs travel in the TrainBatch (computed
by `compute_advantages` from a separate `ref_params` tree passed to it), so
the TrainState carries no reference weights and train_step never touches them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_agent.learner import sharding as sharding_lib
from jaxrl_agent.learner.adaptive_kl import KLControllerState
from jaxrl_agent.learner.hparams import LearnerHParams
from jaxrl_agent.learner.optimizer import freeze_by_name, make_optimizer
from jaxrl_agent.models.config import ModelConfig
from jaxrl_agent.models.transformer import init_params, param_logical_axes
from jaxrl_agent.models.value import init_value_params, value_param_logical_axes


class TrainState(NamedTuple):
    """Learner state (a pytree; None fields hold nothing).

    Attributes:
      params: policy parameters.
      opt_state: optax state of the policy optimizer.
      step: [] int32, number of train_step calls so far.
      rng: [2] uint32 raw PRNG key data (jax.random.key_data), for shuffling.
      kl_state: KLControllerState, the current KL coefficient.
      value_params: critic parameters, or None without a critic.
      value_opt_state: optax state of the critic optimizer, or None.
    """

    params: Any
    opt_state: Any
    step: Any
    rng: Any
    kl_state: KLControllerState
    value_params: Any = None
    value_opt_state: Any = None


def make_optimizers(hp: LearnerHParams) -> tuple[optax.GradientTransformation, optax.GradientTransformation]:
    """(policy optimizer, critic optimizer) from the hyperparameters."""
    common = dict(
        warmup_steps=hp.warmup_steps, total_steps=hp.total_steps, schedule=hp.schedule,
        end_lr_ratio=hp.end_lr_ratio, b1=hp.b1, b2=hp.b2, eps=hp.eps,
        weight_decay=hp.weight_decay, max_grad_norm=hp.max_grad_norm,
    )
    mask = freeze_by_name(*hp.frozen_params) if hp.frozen_params else None
    policy_tx = make_optimizer(lr=hp.lr, trainable_mask=mask, **common)
    value_tx = make_optimizer(lr=hp.value_lr or hp.lr, **common)
    return policy_tx, value_tx


def _init_state(config, hp, rng, params, value_params):
    policy_tx, value_tx = make_optimizers(hp)
    rng_params, rng_value, rng_state = jax.random.split(rng, 3)
    if params is None:
        params = init_params(config, rng_params)
    if hp.use_critic and value_params is None:
        value_params = init_value_params(config, rng_value)
    if not hp.use_critic:
        value_params = None
    return TrainState(
        params=params,
        opt_state=policy_tx.init(params),
        step=jnp.zeros((), jnp.int32),
        rng=jax.random.key_data(rng_state),
        kl_state=hp.kl_controller().init(),
        value_params=value_params,
        value_opt_state=None if value_params is None else value_tx.init(value_params),
    )


def state_shardings(
    config: ModelConfig,
    hp: LearnerHParams,
    mesh: jax.sharding.Mesh,
    rules=sharding_lib.LOGICAL_AXIS_RULES,
) -> TrainState:
    """NamedShardings of every TrainState leaf on `mesh` (same tree)."""
    shapes = jax.eval_shape(lambda k: _init_state(config, hp, k, None, None), jax.random.key(0))
    policy_tx, value_tx = make_optimizers(hp)
    p_sh = sharding_lib.param_shardings(shapes.params, param_logical_axes(config), mesh, rules)
    rep = sharding_lib.replicated(mesh)
    v_sh = vo_sh = None
    if shapes.value_params is not None:
        v_sh = sharding_lib.param_shardings(
            shapes.value_params, value_param_logical_axes(config), mesh, rules
        )
        vo_sh = sharding_lib.opt_state_shardings(value_tx, shapes.value_opt_state, v_sh, mesh)
    return TrainState(
        params=p_sh,
        opt_state=sharding_lib.opt_state_shardings(policy_tx, shapes.opt_state, p_sh, mesh),
        step=rep,
        rng=rep,
        kl_state=jax.tree.map(lambda _: rep, shapes.kl_state),
        value_params=v_sh,
        value_opt_state=vo_sh,
    )


def abstract_state(config: ModelConfig, hp: LearnerHParams, mesh: jax.sharding.Mesh) -> TrainState:
    """ShapeDtypeStructs with shardings: the target for a checkpoint restore."""
    shapes = jax.eval_shape(lambda k: _init_state(config, hp, k, None, None), jax.random.key(0))
    shardings = state_shardings(config, hp, mesh)
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), shapes, shardings
    )


def init_train_state(
    config: ModelConfig,
    hp: LearnerHParams,
    rng: jax.Array,
    *,
    mesh: jax.sharding.Mesh,
    params: Any = None,
    value_params: Any = None,
) -> TrainState:
    """Creates the TrainState directly in its sharded layout on `mesh`.

    Args:
      config: the model.
      hp: learner hyperparameters (optimizer, critic or not, KL controller).
      rng: a typed PRNG key (jax.random.key).
      mesh: the device mesh.
      params: initial policy params (e.g. a loaded checkpoint); None: random init.
      value_params: initial critic params; None: random init when hp needs a critic.
    """
    shardings = state_shardings(config, hp, mesh)
    init = jax.jit(
        lambda k, p, v: _init_state(config, hp, k, p, v), out_shardings=shardings
    )
    return init(rng, params, value_params)
