"""Value model (PPO critic): the same transformer backbone plus a scalar head.

    value_params = {"backbone": <transformer params without lm_head>,
                    "value_head": {"kernel": [D] , "bias": []}}

The backbone is the policy's own code (`transformer.forward_hidden`), so a
critic can start from a policy checkpoint:
`{"backbone": policy_params, "value_head": init_value_params(...)["value_head"]}`
(an `lm_head` entry in the backbone is ignored). A reference policy needs no
code at all: it is a second params pytree used with the policy functions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from jaxrl_agent.models import axes
from jaxrl_agent.models.config import ModelConfig
from jaxrl_agent.models.transformer import forward_hidden, init_params, param_logical_axes


def init_value_params(config: ModelConfig, rng) -> dict:
    """Random critic params: a backbone (no lm_head) and a zero-bias head with
    normal(0.02) kernel, in config.param_dtype."""
    rng_backbone, rng_head = jax.random.split(rng)
    backbone = init_params(config, rng_backbone)
    backbone.pop("lm_head", None)
    pdt = jnp.dtype(config.param_dtype)
    head = {
        "kernel": 0.02 * jax.random.normal(rng_head, (config.hidden_size,), pdt),
        "bias": jnp.zeros((), pdt),
    }
    return {"backbone": backbone, "value_head": head}


def value_param_logical_axes(config: ModelConfig) -> dict:
    """PartitionSpecs over logical names, same tree as init_value_params."""
    backbone = param_logical_axes(config)
    backbone.pop("lm_head", None)
    return {"backbone": backbone,
            "value_head": {"kernel": PartitionSpec(axes.EMBED), "bias": PartitionSpec()}}


def compute_values(value_params, config: ModelConfig, tokens, positions, segment_ids):
    """V(s_t) for every token: the value after reading tokens[:, :t+1].

    Args:
        value_params: from init_value_params.
        config: the backbone's config.
        tokens, positions, segment_ids: [B, T] int32 as in forward_hidden.

    Returns:
        [B, T] float32 values (the head runs in float32).

    Raises:
        ValueError: if the inputs are not all [B, T].
    """
    hidden = forward_hidden(value_params["backbone"], config, tokens, positions, segment_ids)
    head = value_params["value_head"]
    return (jnp.einsum("btd,d->bt", hidden.astype(jnp.float32), head["kernel"].astype(jnp.float32))
            + head["bias"].astype(jnp.float32))
