"""HF checkpoint I/O: parity with transformers (torch CPU) and round trips."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from jaxrl_agent.models import hf_io  # noqa: E402
from jaxrl_agent.models.hf_io import load_hf_checkpoint, save_hf_checkpoint  # noqa: E402
from jaxrl_agent.models.transformer import compute_logits, forward_hidden, init_params  # noqa: E402
from jaxrl_agent.models.config import tiny_config  # noqa: E402

T = 40  # longer than the llama3 original context below, so the scaling matters
COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-6)


def _hf_model(family, tie):
    if family == "qwen3":
        cfg = transformers.Qwen3Config(**COMMON, head_dim=16, rope_theta=1e6,
                                       tie_word_embeddings=tie)
        cls = transformers.Qwen3ForCausalLM
    elif family == "qwen2":
        cfg = transformers.Qwen2Config(**COMMON, rope_theta=1e4, tie_word_embeddings=tie)
        cls = transformers.Qwen2ForCausalLM
    else:
        cfg = transformers.LlamaConfig(
            **COMMON, tie_word_embeddings=tie, rope_theta=5e5,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
        cls = transformers.LlamaForCausalLM
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(cfg).eval()
    with torch.no_grad():  # random norms and biases too, so every mapping is exercised
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _tokens():
    return np.random.default_rng(0).integers(0, 256, size=(2, T)).astype(np.int32)


def _hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor(tokens, dtype=torch.long)).logits.float().numpy()


def _our_logits(params, config, tokens):
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    hidden = forward_hidden(params, config, jnp.asarray(tokens), positions,
                            jnp.ones((b, t), jnp.int32))
    return np.asarray(compute_logits(params, config, hidden))


@pytest.mark.parametrize("family,tie", [("qwen3", True), ("qwen3", False),
                                        ("llama", False), ("qwen2", True)])
def test_parity_with_transformers_and_round_trip(tmp_path, family, tie):
    model = _hf_model(family, tie)
    model.save_pretrained(tmp_path / "hf", safe_serialization=True)
    tokens = _tokens()
    expected = _hf_logits(model, tokens)

    config, params = load_hf_checkpoint(str(tmp_path / "hf"), param_dtype=jnp.float32,
                                        dtype=jnp.float32)
    assert config.family == family and config.tie_word_embeddings == tie
    assert config.param_dtype == "float32"
    assert ("lm_head" in params) == (not tie)
    np.testing.assert_allclose(_our_logits(params, config, tokens), expected, atol=1e-4, rtol=0)

    # ours -> HF (sharded) -> ours is bit-exact; transformers reads it back.
    out = tmp_path / "ours"
    save_hf_checkpoint(params, config, str(out), max_shard_bytes=40_000)
    assert (out / hf_io.INDEX_FILE).exists() and len(list(out.glob("*.safetensors"))) > 1
    _, params2 = load_hf_checkpoint(str(out), param_dtype=jnp.float32)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
                 params, params2)
    reloaded = type(model).from_pretrained(str(out), attn_implementation="eager").eval()
    np.testing.assert_allclose(_hf_logits(reloaded, tokens), expected, atol=1e-5, rtol=0)


def test_single_file_bf16_storage_and_atomic_replace(tmp_path):
    config = tiny_config(tie_word_embeddings=False)
    params = init_params(config, jax.random.key(1))
    out = tmp_path / "ckpt"
    save_hf_checkpoint(params, config, str(out))
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors"]
    save_hf_checkpoint(params, config, str(out), dtype="bfloat16")  # replaces in place
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # no tmp/old directories left
    hf_config = json.loads((out / "config.json").read_text())
    assert hf_config["model_type"] == "qwen3" and hf_config["torch_dtype"] == "bfloat16"
    assert hf_config["architectures"] == ["Qwen3ForCausalLM"]
    loaded_config, loaded = load_hf_checkpoint(str(out), param_dtype=jnp.bfloat16)
    assert loaded_config.replace(param_dtype="float32") == config
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(
        np.asarray(a), np.asarray(b.astype(jnp.bfloat16))), loaded, params)


def test_failed_save_leaves_nothing(tmp_path, monkeypatch):
    config = tiny_config()
    params = init_params(config, jax.random.key(0))

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(hf_io, "save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        save_hf_checkpoint(params, config, str(tmp_path / "ckpt"))
    assert os.listdir(tmp_path) == []


def test_load_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        load_hf_checkpoint(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_hf_checkpoint(str(tmp_path / "empty"))

    config = tiny_config()
    params = init_params(config, jax.random.key(0))
    save_hf_checkpoint(params, config, str(tmp_path / "ok"))
    hf_config = json.loads((tmp_path / "ok" / "config.json").read_text())

    bad = tmp_path / "bad_shape"
    save_hf_checkpoint(params, config, str(bad))
    (bad / "config.json").write_text(json.dumps({**hf_config, "intermediate_size": 96}))
    with pytest.raises(ValueError, match=r"gate_proj.weight.*\[128, 64\].*\[96, 64\]"):
        load_hf_checkpoint(str(bad))

    missing = tmp_path / "missing"
    pruned = {k: v for k, v in params.items() if k != "layers_1"}
    save_hf_checkpoint(pruned, config.replace(num_layers=1), str(missing))
    (missing / "config.json").write_text(json.dumps(hf_config))
    with pytest.raises(ValueError, match=r"missing tensor 'model\.layers\.1\."):
        load_hf_checkpoint(str(missing))

    with pytest.raises(ValueError, match="layers_1"):
        save_hf_checkpoint(pruned, config, str(tmp_path / "x"))
    with pytest.raises(ValueError, match="model_type"):
        (tmp_path / "ok" / "config.json").write_text(json.dumps({**hf_config, "model_type": "gpt2"}))
        load_hf_checkpoint(str(tmp_path / "ok"))
