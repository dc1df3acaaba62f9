"""Flax decoder (Llama 3, Qwen2/2.5, Qwen3), logprobs, value head, KV cache, HF I/O."""

from jaxrl_agent.models.config import ModelConfig, tiny_config
from jaxrl_agent.models.hf_io import load_hf_checkpoint, save_hf_checkpoint
from jaxrl_agent.models.kv_cache import KVCache, decode_step, init_cache, prefill
from jaxrl_agent.models.logprobs import logprobs_from_hidden, token_logprobs
from jaxrl_agent.models.transformer import (
    causal_segment_mask,
    compute_logits,
    forward_hidden,
    init_params,
    param_logical_axes,
)
from jaxrl_agent.models.value import compute_values, init_value_params, value_param_logical_axes

__all__ = [
    "KVCache",
    "ModelConfig",
    "causal_segment_mask",
    "compute_logits",
    "compute_values",
    "decode_step",
    "forward_hidden",
    "init_cache",
    "init_params",
    "init_value_params",
    "load_hf_checkpoint",
    "logprobs_from_hidden",
    "param_logical_axes",
    "prefill",
    "save_hf_checkpoint",
    "tiny_config",
    "token_logprobs",
    "value_param_logical_axes",
]
