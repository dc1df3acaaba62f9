"""Hugging Face checkpoint directories (config.json + safetensors) <-> params.

Tensor names are those of transformers' LlamaForCausalLM / Qwen2ForCausalLM /
Qwen3ForCausalLM (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight,
..., model.norm.weight, lm_head.weight unless tied); torch Linear weights are
[out, in] and are transposed/reshaped into the [in, out] kernels of
`transformer`. Conversion is transposes and reshapes only, so
params -> HF -> params is bit-exact in the stored dtype.

Saving writes into `DIR.tmp-XXXX` beside the target and renames it into place
(os.replace), so a reader never sees a half-written directory; shards follow
HF's `model-0000i-of-0000n.safetensors` + `model.safetensors.index.json`.
I/O goes through `safetensors` (numpy; bfloat16 via ml_dtypes), never torch.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (registers numpy bfloat16 for safetensors)
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from jaxrl_agent.models.config import ModelConfig

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def _tensor_specs(config: ModelConfig) -> Iterator[tuple[str, tuple, Callable, Callable]]:
    """(hf_name, params path, hf -> ours, ours -> hf) for every tensor."""
    d, h, kh, hd = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim
    same = (lambda a: a, lambda a: a)
    transpose = (lambda a: a.T, lambda a: a.T)

    def heads_in(n):  # [n*hd, D] <-> [D, n, hd]
        return (lambda a: a.T.reshape(d, n, hd), lambda a: a.reshape(d, n * hd).T)

    def heads_bias(n):  # [n*hd] <-> [n, hd]
        return (lambda a: a.reshape(n, hd), lambda a: a.reshape(n * hd))

    o_proj = (lambda a: a.T.reshape(h, hd, d), lambda a: a.reshape(h * hd, d).T)
    yield ("model.embed_tokens.weight", ("embed_tokens",), *same)
    for i in range(config.num_layers):
        pre, ours = f"model.layers.{i}.", f"layers_{i}"
        yield (pre + "input_layernorm.weight", (ours, "input_layernorm", "scale"), *same)
        yield (pre + "post_attention_layernorm.weight",
               (ours, "post_attention_layernorm", "scale"), *same)
        for name, n in (("q_proj", h), ("k_proj", kh), ("v_proj", kh)):
            yield (pre + f"self_attn.{name}.weight", (ours, "self_attn", name, "kernel"),
                   *heads_in(n))
            if config.attention_bias:
                yield (pre + f"self_attn.{name}.bias", (ours, "self_attn", name, "bias"),
                       *heads_bias(n))
        yield (pre + "self_attn.o_proj.weight", (ours, "self_attn", "o_proj", "kernel"), *o_proj)
        if config.qk_norm:
            for name in ("q_norm", "k_norm"):
                yield (pre + f"self_attn.{name}.weight", (ours, "self_attn", name, "scale"), *same)
        for name in ("gate_proj", "up_proj", "down_proj"):
            yield (pre + f"mlp.{name}.weight", (ours, "mlp", name, "kernel"), *transpose)
    yield ("model.norm.weight", ("norm", "scale"), *same)
    if not config.tie_word_embeddings:
        yield ("lm_head.weight", ("lm_head",), *transpose)


def _expected_shapes(config: ModelConfig) -> dict[tuple, tuple]:
    from jaxrl_agent.models.transformer import init_params  # avoid an import cycle at load
    abstract = jax.eval_shape(lambda: init_params(config, jax.random.key(0)))
    return {path: tuple(leaf.shape) for path, leaf in _flatten(abstract)}


def _flatten(tree, prefix=()):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _flatten(value, prefix + (key,))
        else:
            yield prefix + (key,), value


def _set(tree: dict, path: tuple, value):
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _get(tree: dict, path: tuple):
    for key in path:
        tree = tree[key]
    return tree


def _weight_files(path: str) -> dict[str, str]:
    """tensor name -> safetensors file, from the index or by listing the files."""
    index = os.path.join(path, INDEX_FILE)
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return {name: os.path.join(path, file) for name, file in weight_map.items()}
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors files and no {INDEX_FILE}")
    names = {}
    for file in files:
        with safe_open(file, framework="np") as f:
            names.update({name: file for name in f.keys()})
    return names


def load_hf_checkpoint(path: str, *, param_dtype=jnp.float32, dtype=None):
    """Reads an HF Llama/Qwen2/Qwen3 checkpoint directory.

    Args:
        path: directory with config.json and model.safetensors, or sharded
            model-*.safetensors with model.safetensors.index.json.
        param_dtype: dtype of the returned params (tensors are cast on the host).
        dtype: optional compute dtype for the returned config (default: the
            ModelConfig default, bfloat16).

    Returns:
        (config, params): ModelConfig with param_dtype set, plain params pytree.

    Raises:
        FileNotFoundError: no directory, no config.json or no safetensors file (names the path).
        ValueError: a missing tensor (names it and the directory), a shape
            mismatch (names the tensor, the expected and the stored shape), an
            unexpected tensor, or a config this model does not support.
    """
    config_file = os.path.join(path, "config.json")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: checkpoint directory does not exist")
    if not os.path.exists(config_file):
        raise FileNotFoundError(f"{config_file}: missing (expected an HF checkpoint directory)")
    with open(config_file) as f:
        hf_config = json.load(f)
    overrides = {"param_dtype": jnp.dtype(param_dtype).name}
    if dtype is not None:
        overrides["dtype"] = jnp.dtype(dtype).name
    config = ModelConfig.from_hf_dict(hf_config, **overrides)
    files = _weight_files(path)
    shapes = _expected_shapes(config)
    specs = list(_tensor_specs(config))
    wanted = {spec[0] for spec in specs}
    unexpected = sorted(n for n in files if n not in wanted and not n.endswith(_IGNORED_SUFFIXES)
                        and not (n == "lm_head.weight" and config.tie_word_embeddings))
    if unexpected:
        raise ValueError(f"{path}: unexpected tensors for {config.family} "
                         f"(tie_word_embeddings={config.tie_word_embeddings}): {unexpected[:8]}")
    by_file: dict[str, list] = {}
    for spec in specs:
        if spec[0] not in files:
            raise ValueError(f"{path}: missing tensor {spec[0]!r}")
        by_file.setdefault(files[spec[0]], []).append(spec)
    params: dict = {}
    np_dtype = np.dtype(jnp.dtype(param_dtype))
    for file, file_specs in by_file.items():
        if not os.path.exists(file):
            raise FileNotFoundError(f"{file}: listed in {INDEX_FILE} but missing")
        with safe_open(file, framework="np") as f:
            for hf_name, ours, to_ours, to_hf in file_specs:
                array = f.get_tensor(hf_name)
                want = tuple(to_hf(np.zeros(shapes[ours], np.int8)).shape)
                if tuple(array.shape) != want:
                    raise ValueError(
                        f"{hf_name}: stored shape {list(array.shape)} in {file}, expected "
                        f"{list(want)} from config.json")
                _set(params, ours, jnp.asarray(to_ours(array).astype(np_dtype)))
    return config, params


def save_hf_checkpoint(params, config: ModelConfig, path: str, *,
                       max_shard_bytes: int = 5 * 1024**3, dtype=None) -> None:
    """Writes params as an HF checkpoint directory, atomically.

    Args:
        params: plain params pytree (init_params / load_hf_checkpoint layout).
        config: its ModelConfig (family decides model_type and architectures).
        path: target directory; replaced if it exists.
        max_shard_bytes: split into model-0000i-of-0000n.safetensors with an
            index when the tensors exceed this; otherwise one model.safetensors.
        dtype: optional storage dtype (e.g. 'bfloat16' for serving); default
            the params' own dtype (bit-exact round trip).

    Raises:
        ValueError: a params entry is missing or has the wrong shape, or
            max_shard_bytes <= 0.
    """
    if max_shard_bytes <= 0:
        raise ValueError(f"max_shard_bytes: expected > 0, got {max_shard_bytes}")
    shapes = _expected_shapes(config)
    tensors = {}
    for hf_name, ours, _, to_hf in _tensor_specs(config):
        try:
            value = _get(params, ours)
        except (KeyError, TypeError):
            raise ValueError(f"params: missing entry {'/'.join(ours)} (for {hf_name})") from None
        if tuple(value.shape) != shapes[ours]:
            raise ValueError(f"params: {'/'.join(ours)} has shape {list(value.shape)}, "
                             f"expected {list(shapes[ours])}")
        array = np.asarray(jax.device_get(value))
        if dtype is not None:
            array = array.astype(np.dtype(jnp.dtype(dtype)))
        tensors[hf_name] = np.ascontiguousarray(to_hf(array))
    storage_dtype = jnp.dtype(dtype).name if dtype is not None else next(
        iter(tensors.values())).dtype.name
    shards: list[dict] = [{}]
    size = 0
    for name, array in tensors.items():
        if shards[-1] and size + array.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = array
        size += array.nbytes

    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(path) + ".tmp-", dir=parent)
    try:
        n = len(shards)
        names = [SINGLE_FILE] if n == 1 else [
            f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
        for file, shard in zip(names, shards):
            save_file(shard, os.path.join(tmp, file), metadata={"format": "pt"})
        if n > 1:
            index = {"metadata": {"total_size": sum(a.nbytes for a in tensors.values())},
                     "weight_map": {name: file for file, shard in zip(names, shards)
                                    for name in shard}}
            with open(os.path.join(tmp, INDEX_FILE), "w") as f:
                json.dump(index, f, indent=2)
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(config.to_hf_dict(torch_dtype=storage_dtype), f, indent=2)
        if os.path.exists(path):
            old = tempfile.mkdtemp(prefix=os.path.basename(path) + ".old-", dir=parent)
            os.replace(path, os.path.join(old, "ckpt"))
            os.replace(tmp, path)
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
