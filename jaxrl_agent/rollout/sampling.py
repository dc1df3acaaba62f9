"""Token sampling (temperature, top-k, top-p) and rollout/learner logprob checks.

Logprob convention (the same as SGLang's default sampler): the logprob of a
sampled token is `log softmax(logits / temperature)[token]`, taken after
temperature and BEFORE top-k/top-p truncation; with temperature 0 (greedy)
it is `log softmax(logits)[token]`. So the learner's recomputation
(`jaxrl_agent.models.logprobs.token_logprobs` with the same temperature, or
1.0 for greedy) is the matching quantity. SGLang's sampler computes
`log(softmax(logits / T))` before its top-k/top-p renormalization unless the
server runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1, in which case it returns
logprobs before temperature.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_agent.checks import check_shape


def _truncation_mask(scaled: jax.Array, top_p: jax.Array, top_k: jax.Array) -> jax.Array:
    """[B, V] bool: tokens kept by top-k (k=-1 off) then top-p (1 off), per row."""
    v = scaled.shape[-1]
    sorted_desc = -jnp.sort(-scaled, axis=-1)  # [B, V]
    rank = jnp.arange(v)[None, :]
    k = jnp.where(top_k > 0, jnp.minimum(top_k, v), v)[:, None]
    in_k = rank < k
    probs = jax.nn.softmax(jnp.where(in_k, sorted_desc, -jnp.inf), axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep_sorted = in_k & (mass_before < top_p[:, None])
    keep_sorted = keep_sorted.at[:, 0].set(True)
    n_keep = jnp.sum(keep_sorted, axis=-1)  # [B] >= 1
    threshold = jnp.take_along_axis(sorted_desc, (n_keep - 1)[:, None], axis=-1)
    return scaled >= threshold


def sample_tokens(
    logits: jax.Array,
    keys: jax.Array,
    temperature: jax.Array,
    top_p: jax.Array,
    top_k: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Samples one token per row and returns its logprob (module docstring).

    Args:
        logits: [B, V] float32 next-token logits.
        keys: [B] typed PRNG keys, one per row.
        temperature: [B] float32; 0 means greedy (argmax).
        top_p: [B] float32 in (0, 1]; 1 disables.
        top_k: [B] int32; -1 disables.

    Returns:
        tokens [B] int32 and logprobs [B] float32 = log softmax(logits / T)[token]
        (T = 1 for greedy rows), before top-k/top-p truncation. Ties at the
        top-k/top-p threshold keep every tied token.
    """
    dims = check_shape("logits", logits, ("B", "V"))
    for name, x in (("keys", keys), ("temperature", temperature), ("top_p", top_p),
                    ("top_k", top_k)):
        check_shape(name, x, ("B",), dims)
    logits = logits.astype(jnp.float32)
    greedy = temperature <= 0
    scaled = logits / jnp.where(greedy, 1.0, temperature)[:, None]
    logp = jax.nn.log_softmax(scaled, axis=-1)
    needs_trunc = jnp.any((top_k > 0) | (top_p < 1.0))
    keep = jax.lax.cond(
        needs_trunc,
        lambda: _truncation_mask(scaled, top_p, top_k),
        lambda: jnp.ones(scaled.shape, bool),
    )
    masked = jnp.where(keep, scaled, -jnp.inf)
    sampled = jax.vmap(jax.random.categorical)(keys, masked)
    tokens = jnp.where(greedy, jnp.argmax(logits, axis=-1), sampled).astype(jnp.int32)
    return tokens, jnp.take_along_axis(logp, tokens[:, None], axis=-1)[:, 0]


def logprob_mismatch_metrics(learner_logprobs, rollout_logprobs, loss_mask) -> dict[str, jax.Array]:
    """How far the engine's logprobs are from the learner's recomputation.

    Jittable; use it inside train_step or on host arrays.

    Args:
        learner_logprobs: [B, T] float logprobs recomputed by the learner.
        rollout_logprobs: [B, T] float logprobs the engine reported.
        loss_mask: [B, T] bool, true on generated tokens (only these count).

    Returns:
        float32 scalars: "logprob_diff_mean" and "logprob_diff_max" (absolute
        difference over masked tokens) and "k3_kl", the k3 estimator of
        KL(rollout || learner): mean over masked tokens of exp(r) - 1 - r with
        r = learner - rollout (Schulman 2020, "Approximating KL divergence").
        All 0 when no token is masked.

    Raises:
        ValueError: mismatched shapes.
    """
    dims = check_shape("learner_logprobs", learner_logprobs, ("B", "T"))
    check_shape("rollout_logprobs", rollout_logprobs, ("B", "T"), dims)
    check_shape("loss_mask", loss_mask, ("B", "T"), dims)
    mask = jnp.asarray(loss_mask, bool)
    diff = (jnp.asarray(learner_logprobs, jnp.float32)
            - jnp.asarray(rollout_logprobs, jnp.float32))
    r = jnp.where(mask, diff, 0.0)
    n = jnp.maximum(jnp.sum(mask), 1)
    return {
        "logprob_diff_mean": jnp.sum(jnp.abs(r)) / n,
        "logprob_diff_max": jnp.max(jnp.abs(r), initial=0.0),
        "k3_kl": jnp.sum(jnp.expm1(r) - r) / n,
    }
