"""Per-token logprobs and entropies without materializing [B, T, V] logits.

Alignment (jaxrl_agent/types.py): logprobs[:, t] = log pi(tokens[:, t] | tokens[:, :t]),
read from the logits at t - 1; position 0 (and the first token of every packed
segment, and padding) has none and is 0. entropy[:, t] is the entropy of that
same distribution.

Temperature is applied as logits / temperature before the softmax, exactly as
SGLang/vLLM and the embedded engine compute the logprobs they report for
sampled tokens, so the learner's ratio pi_theta / pi_rollout compares like
with like.

Logits are computed chunk by chunk over time (float32 accumulation from the
compute-dtype hidden states) inside `lax.map`; each chunk is wrapped in
`jax.checkpoint`, so the backward pass recomputes a chunk's logits instead of
storing all of them: peak memory is O(B * chunk_size * V), not O(B * T * V).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_agent.checks import check_positive, check_shape
from jaxrl_agent.models.config import ModelConfig
from jaxrl_agent.models.transformer import compute_logits, forward_hidden


def _chunk_stats(params, config, hidden, targets, temperature):
    """hidden [B, C, D], targets [B, C] -> (logprob [B, C], entropy [B, C]) float32."""
    logits = compute_logits(params, config, hidden) / temperature
    lse = jax.nn.logsumexp(logits, axis=-1)
    target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    probs = jnp.exp(logits - lse[..., None])
    entropy = lse - jnp.sum(probs * logits, axis=-1)
    return target_logit - lse, entropy


def logprobs_from_hidden(hidden, params, config: ModelConfig, targets, *, temperature=1.0,
                         chunk_size: int = 256, segment_ids=None, return_entropy: bool = True):
    """Logprobs (and entropies) of `targets` from the hidden states of the same tokens.

    Args:
        hidden: [B, T, D] hidden states from forward_hidden (position t has seen
            tokens[:, :t+1]).
        params, config: the policy.
        targets: [B, T] int32 token ids (the tokens hidden was computed from).
        temperature: > 0; logits are divided by it (Python float or a traced scalar).
        chunk_size: time steps per chunk (>= 1); T-1 is padded up to a multiple.
        segment_ids: optional [B, T] int32; when given, positions whose segment
            differs from the previous token's, and padding (0), get 0.
        return_entropy: when False the second output is None.

    Returns:
        (logprobs [B, T] float32, entropy [B, T] float32 or None); index 0 is 0.

    Raises:
        ValueError: on mismatched shapes, chunk_size < 1 or a Python temperature <= 0.
    """
    dims = check_shape("hidden", hidden, ("B", "T", config.hidden_size))
    check_shape("targets", targets, ("B", "T"), dims)
    check_positive("chunk_size", chunk_size)
    if isinstance(temperature, (int, float)):
        check_positive("temperature", temperature)
    b, t = targets.shape
    n = t - 1
    if n == 0:
        zeros = jnp.zeros((b, t), jnp.float32)
        return zeros, (zeros if return_entropy else None)
    chunk = min(chunk_size, n)
    n_chunks = -(-n // chunk)
    pad = n_chunks * chunk - n
    h = jnp.pad(hidden[:, :-1], ((0, 0), (0, pad), (0, 0)))
    y = jnp.pad(targets[:, 1:], ((0, 0), (0, pad)))
    h = h.reshape(b, n_chunks, chunk, -1).swapaxes(0, 1)  # [N, B, C, D]
    y = y.reshape(b, n_chunks, chunk).swapaxes(0, 1)

    @jax.checkpoint
    def one(xs):
        return _chunk_stats(params, config, xs[0], xs[1], temperature)

    logp, ent = jax.lax.map(one, (h, y))

    def unchunk(a):
        a = a.swapaxes(0, 1).reshape(b, n_chunks * chunk)[:, :n]
        a = jnp.concatenate([jnp.zeros((b, 1), jnp.float32), a], axis=1)
        if segment_ids is not None:
            check_shape("segment_ids", segment_ids, ("B", "T"), dims)
            first = jnp.concatenate(
                [jnp.ones((b, 1), bool), segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)
            a = jnp.where(first | (segment_ids == 0), 0.0, a)
        return a

    return unchunk(logp), (unchunk(ent) if return_entropy else None)


def token_logprobs(params, config: ModelConfig, tokens, positions, segment_ids, *,
                   temperature=1.0, chunk_size: int = 256, return_entropy: bool = True):
    """log pi(tokens[:, t] | tokens[:, :t]) / temperature-softmax, and its entropy.

    Args:
        params, config: the policy (or a reference policy: another params tree).
        tokens: [B, T] int32 token ids.
        positions: [B, T] int32 position ids.
        segment_ids: [B, T] int32 (0 padding; packed episodes never attend across).
        temperature: > 0, logits / temperature (as the rollout engines).
        chunk_size: time steps of logits computed at once.
        return_entropy: when False the second output is None.

    Returns:
        (logprobs [B, T] float32, entropy [B, T] float32 or None); 0 at index 0,
        at the first token of each segment and on padding. Differentiable.

    Raises:
        ValueError: on mismatched shapes or bad chunk_size/temperature.
    """
    hidden = forward_hidden(params, config, tokens, positions, segment_ids)
    return logprobs_from_hidden(hidden, params, config, tokens, temperature=temperature,
                                chunk_size=chunk_size, segment_ids=segment_ids,
                                return_entropy=return_entropy)
