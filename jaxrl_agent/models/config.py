"""Model configuration of the Llama 3 and Qwen2/Qwen2.5/Qwen3 decoder families.

`ModelConfig` holds exactly what the Flax transformer needs and converts to and
from the `config.json` of a Hugging Face checkpoint (model_type `llama`,
`qwen2`, `qwen3`). Both the legacy (`rope_theta` + `rope_scaling`, transformers
4.x) and the current (`rope_parameters`, transformers 5.x) spellings of the
RoPE settings are read; both are written.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl_agent.checks import check_choice

FAMILIES = ("llama", "qwen2", "qwen3")
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
ROPE_TYPES = ("default", "linear", "llama3")
DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a decoder-only transformer.

    Attributes:
        vocab_size: V, rows of the embedding table.
        hidden_size: D, model width.
        intermediate_size: SwiGLU hidden width.
        num_layers: number of decoder layers.
        num_heads: H, query heads.
        num_kv_heads: K, key/value heads (grouped-query attention; H % K == 0).
        head_dim: per-head width (Qwen3 sets it explicitly; else D // H).
        rope_theta: RoPE base frequency.
        rope_scaling: None or an HF rope-scaling dict with `rope_type` in
            ('default', 'linear', 'llama3') and its parameters (`factor`,
            `low_freq_factor`, `high_freq_factor`, `original_max_position_embeddings`).
        rms_norm_eps: epsilon of every RMSNorm.
        tie_word_embeddings: the output projection is the embedding table.
        attention_bias: q/k/v projections carry a bias (Qwen2/Qwen2.5).
        qk_norm: RMSNorm over head_dim on queries and keys before RoPE (Qwen3).
        max_position_embeddings: context length the checkpoint was trained for.
        family: 'llama', 'qwen2' or 'qwen3' (selects HF names and config fields).
        dtype: compute dtype of activations and matmuls ('bfloat16' default).
        param_dtype: dtype of the parameters ('float32' default).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False
    max_position_embeddings: int = 32768
    family: str = "qwen3"
    dtype: str = "bfloat16"
    param_dtype: str = "float32"

    def __post_init__(self):
        check_choice("family", self.family, FAMILIES)
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("param_dtype", self.param_dtype, DTYPES)
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers",
                     "num_heads", "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads: expected a multiple of num_kv_heads={self.num_kv_heads}, "
                f"got {self.num_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim: expected an even value (RoPE), got {self.head_dim}")
        if self.rope_scaling is not None:
            rope_type = self.rope_scaling.get("rope_type", self.rope_scaling.get("type"))
            check_choice("rope_scaling['rope_type']", rope_type, ROPE_TYPES)

    def __hash__(self):  # rope_scaling is a dict; hash its items so jit can key on configs
        items = tuple(
            (f.name, tuple(sorted(v.items())) if isinstance(v, dict) else v)
            for f in dataclasses.fields(self)
            for v in [getattr(self, f.name)]
        )
        return hash(items)

    def replace(self, **kw) -> "ModelConfig":
        """A copy with the given fields changed."""
        return dataclasses.replace(self, **kw)

    @property
    def rope_type(self) -> str:
        if self.rope_scaling is None:
            return "default"
        return self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default"))

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], **overrides) -> "ModelConfig":
        """Reads an HF `config.json` dict (llama, qwen2, qwen3).

        Raises:
            ValueError: unknown model_type, or a feature this model does not
                implement (mlp_bias, o_proj bias, sliding-window attention,
                an unsupported rope type), naming the field.
        """
        family = d.get("model_type")
        check_choice("model_type", family, FAMILIES)
        if d.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act: expected 'silu', got {d['hidden_act']!r}")
        if d.get("mlp_bias", False):
            raise ValueError("mlp_bias: true is not supported (expected false)")
        if family != "qwen2" and d.get("attention_bias", False):
            raise ValueError(f"attention_bias: true is not supported for {family} (o_proj bias)")
        if family == "qwen2" and d.get("use_sliding_window", False):
            raise ValueError("use_sliding_window: true is not supported (expected false)")
        rope = dict(d.get("rope_parameters") or {})
        legacy = d.get("rope_scaling")
        if legacy:
            rope = {**dict(legacy), **rope}
        rope_theta = float(rope.pop("rope_theta", d.get("rope_theta", 10000.0)))
        if "type" in rope and "rope_type" not in rope:
            rope["rope_type"] = rope.pop("type")
        rope.pop("type", None)
        rope_scaling = None if rope.get("rope_type", "default") == "default" else rope
        heads = int(d["num_attention_heads"])
        fields = dict(
            vocab_size=int(d["vocab_size"]),
            hidden_size=int(d["hidden_size"]),
            intermediate_size=int(d["intermediate_size"]),
            num_layers=int(d["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(d.get("num_key_value_heads") or heads),
            head_dim=int(d.get("head_dim") or d["hidden_size"] // heads),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            attention_bias=family == "qwen2",
            qk_norm=family == "qwen3",
            max_position_embeddings=int(d.get("max_position_embeddings", 32768)),
            family=family,
        )
        fields.update(overrides)
        return cls(**fields)

    def to_hf_dict(self, torch_dtype: str | None = None) -> dict[str, Any]:
        """The `config.json` dict HF transformers and SGLang read.

        Args:
            torch_dtype: dtype the tensors are stored in; defaults to param_dtype.
        """
        if self.family == "qwen2" and not self.attention_bias:
            raise ValueError("attention_bias: qwen2 checkpoints always carry q/k/v biases")
        if self.family != "qwen2" and self.attention_bias:
            raise ValueError(f"attention_bias: not expressible for family {self.family!r}")
        if self.qk_norm != (self.family == "qwen3"):
            raise ValueError(f"qk_norm: must be {self.family == 'qwen3'} for family {self.family!r}")
        torch_dtype = torch_dtype or self.param_dtype
        rope_parameters = {"rope_type": "default", **(self.rope_scaling or {}),
                           "rope_theta": self.rope_theta}
        d = {
            "architectures": [ARCHITECTURES[self.family]],
            "model_type": self.family,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "rope_parameters": rope_parameters,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_dropout": 0.0,
            "initializer_range": 0.02,
            "use_cache": True,
            "torch_dtype": torch_dtype,
            "dtype": torch_dtype,
        }
        if self.family in ("llama", "qwen3"):
            d["attention_bias"] = False
        if self.family == "llama":
            d["mlp_bias"] = False
        if self.family in ("qwen2", "qwen3"):
            d["use_sliding_window"] = False
            d["sliding_window"] = None
        return d


def tiny_config(vocab_size: int = 256, **overrides) -> ModelConfig:
    """A Qwen3-style config of about 0.1-1M parameters for CPU tests.

    2 layers, D=64, 4 query heads and 2 key/value heads of width 16, SwiGLU
    width 128, tied embeddings; any field can be overridden.
    """
    fields = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attention_bias=False,
        qk_norm=True,
        max_position_embeddings=2048,
        family="qwen3",
    )
    fields.update(overrides)
    return ModelConfig(**fields)
