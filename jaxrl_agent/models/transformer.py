"""The policy model as pure functions over a plain params pytree.

    params = init_params(config, rng)
    hidden = forward_hidden(params, config, tokens, positions, segment_ids)
    logits = compute_logits(params, config, hidden)

Params tree (linen names; `hf_io` maps them to HF names):
    embed_tokens [V, D]; lm_head [D, V] (only when embeddings are untied);
    layers_{i}/{input_layernorm, post_attention_layernorm}/scale [D];
    layers_{i}/self_attn/{q,k,v}_proj/kernel [D, H|K, head_dim] (+ bias [H|K, head_dim]);
    layers_{i}/self_attn/{q,k}_norm/scale [head_dim] (Qwen3);
    layers_{i}/self_attn/o_proj/kernel [H, head_dim, D];
    layers_{i}/mlp/{gate,up}_proj/kernel [D, F], down_proj/kernel [F, D];
    norm/scale [D].
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_agent.checks import check_shape
from jaxrl_agent.models import axes
from jaxrl_agent.models.config import ModelConfig
from jaxrl_agent.models.layers import Transformer


def causal_segment_mask(segment_ids):
    """[B, T] int32 segment ids -> [B, T, T] bool attention mask.

    Query t reads key s iff s <= t and segment_ids[s] == segment_ids[t]; so
    packed episodes never see each other and padding (segment 0) reads only
    padding. The diagonal is always true: no row is empty, no NaN.
    """
    t = segment_ids.shape[1]
    causal = jnp.tril(jnp.ones((t, t), dtype=bool))
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    return causal[None] & same


def _dummy_inputs(config: ModelConfig):
    tokens = jnp.zeros((1, 1), jnp.int32)
    return tokens, tokens, jnp.ones((1, 1, 1), bool)


def _abstract_params(config: ModelConfig):
    """Boxed ShapeDtypeStructs of the params (no compute)."""
    return jax.eval_shape(
        lambda: Transformer(config).init(jax.random.key(0), *_dummy_inputs(config)))["params"]


def init_params(config: ModelConfig, rng) -> dict:
    """Random parameters as HF initializes them: normal(0.02) kernels and
    embeddings, unit norm scales, zero biases.

    Leaf by leaf (one small random op per distinct shape, cached by jax), which
    compiles far faster on CPU than one jitted linen init; the function is
    traceable, so `jax.jit(init_params, static_argnums=0, out_shardings=...)`
    creates sharded params directly.

    Args:
        config: the model.
        rng: a jax PRNG key.

    Returns:
        A plain (unboxed) nested dict of arrays in config.param_dtype.
    """
    abstract = nn.meta.unbox(_abstract_params(config))
    leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    keys = jax.random.split(rng, len(leaves))
    values = []
    for (path, leaf), key in zip(leaves, keys):
        name = path[-1].key
        if name == "scale":
            values.append(jnp.ones(leaf.shape, leaf.dtype))
        elif name == "bias":
            values.append(jnp.zeros(leaf.shape, leaf.dtype))
        else:
            values.append(0.02 * jax.random.normal(key, leaf.shape, leaf.dtype))
    return jax.tree_util.tree_unflatten(treedef, values)


def param_logical_axes(config: ModelConfig) -> dict:
    """PartitionSpecs over the logical names of `axes`, same tree as init_params.

    Map them to mesh axes with `nn.logical_to_mesh_sharding(specs, mesh, rules)`.
    """
    return nn.get_partition_spec(_abstract_params(config))


def forward_hidden(params, config: ModelConfig, tokens, positions, segment_ids):
    """Final-norm hidden states of the decoder.

    Args:
        params: from init_params or hf_io.load_hf_checkpoint.
        config: the model.
        tokens: [B, T] int32 token ids (ids outside [0, V) give NaN rows).
        positions: [B, T] int32 RoPE positions (0.. within each episode).
        segment_ids: [B, T] int32; attention is causal and never crosses
            segment ids; 0 marks padding (reads only padding, stays finite).

    Returns:
        [B, T, D] hidden states in config.dtype.

    Raises:
        ValueError: if the three inputs are not all [B, T].
    """
    dims = check_shape("tokens", tokens, ("B", "T"))
    check_shape("positions", positions, ("B", "T"), dims)
    check_shape("segment_ids", segment_ids, ("B", "T"), dims)
    mask = causal_segment_mask(segment_ids)
    hidden, _ = Transformer(config).apply({"params": params}, tokens, positions, mask)
    return hidden


def output_embedding(params, config: ModelConfig):
    """[D, V] output projection: lm_head, or the transposed embedding table when tied."""
    if config.tie_word_embeddings:
        return params["embed_tokens"].T
    return params["lm_head"]


def compute_logits(params, config: ModelConfig, hidden):
    """Next-token logits, accumulated in float32.

    Args:
        hidden: [..., D] (e.g. [B, T, D]) hidden states from forward_hidden.

    Returns:
        [..., V] float32 logits (matmul inputs in config.dtype, float32 accumulation).

    Note: this materializes [B, T, V] float32; for per-token logprobs use
    `logprobs.token_logprobs`, which chunks over time.
    """
    if hidden.shape[-1] != config.hidden_size:
        raise ValueError(
            f"hidden: expected last axis D={config.hidden_size}, got shape {list(hidden.shape)}")
    dt = jnp.dtype(config.dtype)
    w = output_embedding(params, config).astype(dt)
    logits = jnp.einsum("...d,dv->...v", hidden.astype(dt), w, preferred_element_type=jnp.float32)
    if logits.ndim == 3:
        logits = nn.with_logical_constraint(logits, (axes.BATCH, axes.LENGTH, axes.VOCAB))
    return logits
