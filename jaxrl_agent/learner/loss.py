"""The learner objective: policy loss + beta * KL - c_H * entropy + c_V * value loss.

Assembled from `jaxrl_agent.losses` by the explicit LearnerHParams. Every term
is aggregated with normalizers passed in from outside (the whole minibatch),
so summing this loss over micro-batches gives exactly the minibatch loss.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jaxrl_agent import losses
from jaxrl_agent.learner.hparams import LearnerHParams
from jaxrl_agent.learner.prepare import TrainBatch, aligned_values
from jaxrl_agent.models.config import ModelConfig
from jaxrl_agent.models.logprobs import token_logprobs
from jaxrl_agent.models.value import compute_values


def policy_loss_kwargs(hp: LearnerHParams) -> dict[str, Any]:
    """Keyword arguments of the chosen policy loss (clips differ per loss)."""
    if hp.policy_loss == "ppo":
        return dict(clip_low=hp.clip_low, clip_high=hp.clip_high, dual_clip=hp.dual_clip)
    return dict(clip_low=hp.clip_low, clip_high=hp.clip_high)


def learner_loss(
    params: Any,
    value_params: Any,
    tb: TrainBatch,
    normalizers: dict[str, Any],
    kl_coef: jnp.ndarray,
    *,
    config: ModelConfig,
    hp: LearnerHParams,
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """Total loss of one (micro-)batch and its metrics.

    Args:
      params, value_params: policy and critic (None without critic) params.
      tb: TrainBatch rows ([b, T] arrays).
      normalizers: {'num_tokens', 'num_seqs', 'max_len'} of the whole
        minibatch (losses.global_normalizers).
      kl_coef: [] float32 beta (from the KL controller state).
      config, hp: model and hyperparameters (static).

    Returns:
      (loss [] float32, metrics: scalar float32 dict with 'loss', 'pg_loss',
      'kl_loss', 'kl', 'entropy', 'entropy_loss', 'value_loss', 'clipfrac',
      'approx_kl' (k3 of pi vs pi_old) ...; metrics are over this micro-batch).
    """
    b = tb.batch
    mask = b.loss_mask
    model_in = (b.tokens, b.positions, b.segment_ids)
    logprobs, entropy = token_logprobs(
        params, config, *model_in, temperature=hp.temperature,
        chunk_size=hp.logprob_chunk_size, return_entropy=True,  # always reported; one reduction per chunk
    )
    agg = dict(agg_mode=hp.agg_mode, **normalizers)
    pg_loss, pm = losses.get_policy_loss(hp.policy_loss)(
        logprobs, tb.old_logprobs, tb.advantages, mask,
        is_weights=tb.is_weights, **policy_loss_kwargs(hp), **agg,
    )
    total = pg_loss
    metrics = {
        "pg_loss": pg_loss,
        "clipfrac": pm["clipfrac"],
        "approx_kl": pm["approx_kl_k3"],
        "ratio_mean": pm["ratio_mean"],
    }
    if tb.ref_logprobs is not None:
        kl_term, km = losses.kl_loss(logprobs, tb.ref_logprobs, mask, kind=hp.kl_kind, **agg)
        metrics.update(kl=km["kl"], kl_loss=kl_term, kl_coef=kl_coef)
        if hp.use_kl_loss:
            total = total + kl_coef * kl_term
    ent_loss = losses.aggregate_loss(-entropy, mask, hp.agg_mode, **normalizers)
    metrics["entropy_loss"] = ent_loss
    metrics["entropy"] = jnp.sum(jnp.where(mask, entropy, 0.0)) / jnp.maximum(jnp.sum(mask), 1)
    if hp.entropy_coef:
        total = total + hp.entropy_coef * ent_loss
    if value_params is not None:
        raw = compute_values(value_params, config, *model_in)
        values = aligned_values(raw, b.segment_ids)
        v_loss, vm = losses.value_loss(
            values, tb.old_values, tb.returns, mask, clip_range=hp.value_clip, **agg
        )
        total = total + hp.value_coef * v_loss
        metrics.update(value_loss=v_loss, vf_clipfrac=vm["vf_clipfrac"],
                       explained_variance=vm["explained_variance"])
    metrics["loss"] = total
    return total, metrics
