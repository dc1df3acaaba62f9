"""compute_advantages: the jitted pass between the batcher and train_step.

Runs the current policy over the batch (old_logprobs: the learner's own
recompute, the denominator of the PPO ratio), the reference policy (if KL is
on), the critic (for GAE), then the advantage estimator named in the
hyperparameters. The engine's `rollout_logprobs` only feed the TIS/MIS
correction weights (pi_old / pi_rollout).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_agent import advantages as adv_lib
from jaxrl_agent import losses
from jaxrl_agent.checks import check_shape
from jaxrl_agent.learner.hparams import LearnerHParams
from jaxrl_agent.models.config import ModelConfig
from jaxrl_agent.models.logprobs import token_logprobs
from jaxrl_agent.models.value import compute_values
from jaxrl_agent.types import Batch


class TrainBatch(NamedTuple):
    """What train_step consumes: the Batch plus advantage inputs ([B, T] float32).

    Attributes:
      batch: the padded Batch.
      old_logprobs: learner logprobs of the policy before this step.
      advantages: per-token advantages, 0 off loss_mask.
      returns: critic targets, or None without a critic.
      old_values: critic values before this step (aligned, V(tokens[:t])), or None.
      ref_logprobs: reference-policy logprobs when a KL loss is used, else None.
      is_weights: TIS/MIS weights pi_old / pi_rollout, or None.
    """

    batch: Batch
    old_logprobs: Any
    advantages: Any
    returns: Any = None
    old_values: Any = None
    ref_logprobs: Any = None
    is_weights: Any = None


def aligned_values(raw_values: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """Shifts critic outputs to the advantages convention values[t] = V(tokens[:t]).

    `compute_values` returns the head output after reading tokens[:t+1]; GAE
    wants the value of the state before token t: out[:, t] = raw[:, t-1],
    out[:, 0] = 0. Args/returns: [B, T] float32.
    """
    check_shape("segment_ids", segment_ids, ("B", "T"), check_shape("raw_values", raw_values, ("B", "T")))
    shifted = jnp.pad(raw_values[:, :-1], ((0, 0), (1, 0)))
    return jnp.where(segment_ids > 0, shifted, 0.0)


def last_token_values(raw_values: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """[B] value after the last real token: the bootstrap of truncated rows."""
    t = raw_values.shape[1]
    last = jnp.max(jnp.where(segment_ids > 0, jnp.arange(t)[None, :], 0), axis=1)
    return jnp.take_along_axis(raw_values, last[:, None], axis=1)[:, 0]


def token_rewards_from_steps(batch: Batch) -> jax.Array:
    """[B, T] float32: step_rewards[b, k] placed on the last action token of turn k.

    Turns without an action token (or padding turns) contribute nothing.
    """
    b, t, s = batch.shape
    onehot = (batch.step_ids[:, :, None] == jnp.arange(s)[None, None, :]) & batch.loss_mask[:, :, None]
    last = jnp.max(jnp.where(onehot, jnp.arange(t)[None, :, None], -1), axis=1)  # [B, S]
    valid = (last >= 0) & batch.step_mask
    rewards = jnp.where(valid, batch.step_rewards, 0.0).astype(jnp.float32)
    rows = jnp.broadcast_to(jnp.arange(b)[:, None], (b, s))
    return jnp.zeros((b, t), jnp.float32).at[rows, jnp.maximum(last, 0)].add(rewards)


def _dense_group_ids(group_ids: jax.Array) -> jax.Array:
    """Remaps arbitrary group ids to 0..B-1 (static num_groups = B)."""
    _, inverse = jnp.unique(group_ids, size=group_ids.shape[0], return_inverse=True, fill_value=-2)
    return inverse.reshape(group_ids.shape).astype(jnp.int32)


def compute_advantages(
    state: Any,
    batch: Batch,
    *,
    config: ModelConfig,
    hp: LearnerHParams,
    ref_params: Any = None,
) -> TrainBatch:
    """Builds the TrainBatch for one train_step (pure; jit it or use make_compute_advantages).

    Args:
      state: TrainState (params, value_params, kl_state.coef are read).
      batch: Batch with tokens etc. [B, T], step arrays [B, S], episode arrays [B].
      config: the policy's ModelConfig.
      hp: LearnerHParams (estimator, gamma, lambda_, KL, IS correction...).
      ref_params: reference-policy params; required when hp.kl_coef > 0.

    Returns:
      TrainBatch with float32 [B, T] arrays.

    Raises:
      ValueError: a batch field has the wrong shape (naming it), or KL is on
        and ref_params is None.
    """
    dims = check_shape("batch.tokens", batch.tokens, ("B", "T"))
    for name in ("loss_mask", "step_ids", "rollout_logprobs", "positions", "segment_ids"):
        check_shape(f"batch.{name}", getattr(batch, name), ("B", "T"), dims)
    for name in ("step_rewards", "step_mask"):
        check_shape(f"batch.{name}", getattr(batch, name), ("B", "S"), dims)
    for name in ("terminated", "truncated", "group_ids", "episode_mask"):
        check_shape(f"batch.{name}", getattr(batch, name), ("B",), dims)
    if hp.use_kl and ref_params is None:
        raise ValueError(f"ref_params: required when kl_coef={hp.kl_coef} > 0, got None")

    mask = batch.loss_mask.astype(bool) & batch.episode_mask[:, None]
    batch = batch._replace(loss_mask=mask)
    run = dict(temperature=hp.temperature, chunk_size=hp.logprob_chunk_size, return_entropy=False)
    model_in = (batch.tokens, batch.positions, batch.segment_ids)
    old_logprobs = jax.lax.stop_gradient(token_logprobs(state.params, config, *model_in, **run)[0])
    ref_logprobs = None
    if hp.use_kl:
        ref_logprobs = jax.lax.stop_gradient(token_logprobs(ref_params, config, *model_in, **run)[0])

    kl_tokens = None
    if hp.kl_in_reward:
        kl = losses.kl_penalty(old_logprobs, ref_logprobs, hp.kl_kind, loss_mask=mask)
        kl_tokens = jnp.where(mask, state.kl_state.coef * kl, 0.0)

    returns = old_values = None
    step_mask = batch.step_mask & batch.episode_mask[:, None]
    est = hp.estimator
    if est in ("gae", "step_gae"):
        raw = jax.lax.stop_gradient(compute_values(state.value_params, config, *model_in))
        old_values = aligned_values(raw, batch.segment_ids)
        boot = dict(bootstrap_value=last_token_values(raw, batch.segment_ids), truncated=batch.truncated)
        if est == "gae":
            rewards = token_rewards_from_steps(batch)
            if kl_tokens is not None:
                rewards = rewards - kl_tokens
            advantages, returns = adv_lib.gae(
                rewards, old_values, mask, gamma=hp.gamma, lambda_=hp.lambda_,
                method=hp.advantage_method, **boot
            )
        else:
            s = batch.step_rewards.shape[1]
            step_rewards = batch.step_rewards
            if kl_tokens is not None:  # a turn's KL is the sum over its action tokens
                onehot = batch.step_ids[:, :, None] == jnp.arange(s)[None, None, :]
                step_rewards = step_rewards - jnp.sum(kl_tokens[:, :, None] * onehot, axis=1)
            step_values = adv_lib.step_values_from_token_values(old_values, batch.step_ids, mask, s)
            step_adv, step_ret = adv_lib.step_gae(
                step_rewards, step_values, step_mask, gamma=hp.gamma, lambda_=hp.lambda_,
                method=hp.advantage_method, **boot
            )
            advantages = adv_lib.broadcast_step_advantages(step_adv, batch.step_ids, mask)
            returns = adv_lib.broadcast_step_advantages(step_ret, batch.step_ids, mask)
        if hp.whiten_advantages:
            advantages = adv_lib.whiten(advantages, mask)
    elif est == "reinforce_pp":
        rewards = token_rewards_from_steps(batch)
        if kl_tokens is not None:
            rewards = rewards - kl_tokens
        advantages = adv_lib.reinforce_pp(rewards, mask, gamma=hp.gamma, method=hp.advantage_method)
    else:
        scores = jnp.sum(jnp.where(step_mask, batch.step_rewards, 0.0), axis=1)
        groups = _dense_group_ids(batch.group_ids)
        num_groups = int(batch.tokens.shape[0])
        if est == "reinforce_pp_baseline":
            advantages = adv_lib.reinforce_pp_baseline(
                scores, groups, mask, num_groups=num_groups, mask=batch.episode_mask
            )
        else:
            episode_adv = adv_lib.get_estimator(est)(
                scores, groups, num_groups=num_groups, mask=batch.episode_mask
            )
            advantages = adv_lib.broadcast_episode_advantages(episode_adv, mask)

    is_weights = None
    if hp.is_correction == "tis":
        is_weights, _ = losses.truncated_importance_weights(
            old_logprobs, batch.rollout_logprobs, mask, cap=hp.tis_cap, level=hp.is_level
        )
    elif hp.is_correction == "mis":
        is_weights, _ = losses.masked_importance_weights(
            old_logprobs, batch.rollout_logprobs, mask, low=hp.mis_low, high=hp.mis_high,
            level=hp.is_level,
        )
    f32 = lambda x: None if x is None else x.astype(jnp.float32)
    return TrainBatch(
        batch=batch,
        old_logprobs=old_logprobs,
        advantages=f32(advantages),
        returns=f32(returns),
        old_values=f32(old_values),
        ref_logprobs=ref_logprobs,
        is_weights=is_weights,
    )
