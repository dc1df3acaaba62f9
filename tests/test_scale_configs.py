"""configs/gpu_qwen3_sglang.py and configs/tpu_qwen3.py: load without an accelerator,
and one RL iteration of each runs end to end with a tiny random Qwen3 of the same family.

The sglang config's rollout goes over HTTP to the project's SGLang-contract
server (embedded engine on the same tiny model), so the weight sync runs
export_for_engine + /update_weights_from_disk as against a real SGLang.
"""

import importlib.util
import json
import os

import numpy as np
import pytest

from jaxrl_agent.learner.checkpoint import Checkpointer
from jaxrl_agent.models.hf_io import load_hf_checkpoint
from jaxrl_agent.pipeline import components as C
from jaxrl_agent.pipeline.evaluation import evaluate_checkpoint
from jaxrl_agent.pipeline.metrics import read_metrics
from jaxrl_agent.pipeline.run import run_training
from jaxrl_agent.rollout.embedded import EmbeddedEngine
from jaxrl_agent.rollout.server import ServerThread, create_app

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_DEBUG = os.path.join(ROOT, "configs", "cpu_debug.py")
SCALE_CONFIGS = ["gpu_qwen3_sglang", "tpu_qwen3"]


def _load(name: str):
    path = os.path.join(ROOT, "configs", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"config_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def _keys(cfg, prefix=""):
    out = set()
    for k, v in cfg.items():
        out.add(prefix + k)
        if hasattr(v, "items"):
            out |= _keys(v, prefix + k + ".")
    return out


@pytest.mark.parametrize("name", SCALE_CONFIGS)
def test_config_loads_and_matches_cpu_debug_structure(name):
    cfg, debug = _load(name), _load("cpu_debug")
    extra = _keys(cfg) - _keys(debug)
    missing = _keys(debug) - _keys(cfg)
    assert not missing, f"{name} lacks fields of cpu_debug: {sorted(missing)}"
    assert extra <= {"learner.num_microbatches", "env.kwargs.num_tasks"}, sorted(extra)
    C.validate(cfg)  # env, engine, URLs and budgets are consistent
    C.learner_hparams(cfg, 100)  # every learner field is a LearnerHParams field
    assert cfg.model.hf_dir and cfg.tokenizer.path == cfg.model.hf_dir
    assert cfg.model.dtype == "bfloat16" and cfg.warmstart.steps == 0
    episodes = cfg.rollout.tasks_per_iter * cfg.rollout.samples_per_task
    assert episodes % (cfg.learner.num_minibatches * cfg.learner.num_microbatches) == 0
    if name == "gpu_qwen3_sglang":
        assert cfg.rollout.engine == "sglang" and len(cfg.rollout.sglang_urls) == 8
        assert int(np.prod(cfg.mesh.shape)) == 8 and episodes % 8 == 0
    else:
        assert cfg.rollout.engine == "embedded" and tuple(cfg.mesh.shape) == (1, -1, 1)


@pytest.fixture(scope="module")
def tiny_qwen3_dir(tmp_path_factory):
    """A random Qwen3ForCausalLM (transformers, torch CPU) + the debug tokenizer, one HF dir."""
    path = tmp_path_factory.mktemp("tiny_qwen3")
    debug = _load("cpu_debug")
    tok = C.build_tokenizer(debug, str(path / "tok_build"))  # BPE trained on the calculator's text
    tok.save(str(path))
    vocab = -(-tok.vocab_size // 64) * 64  # >= the tokenizer's, divisible by the mesh
    hf_cfg = transformers.Qwen3Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
        tie_word_embeddings=False, rope_theta=1e6)
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(hf_cfg).save_pretrained(str(path), safe_serialization=True)
    return str(path)


def _shrink(cfg, model_dir: str):
    """The scale config, made to fit the 8 fake CPU devices and a ~30 s budget."""
    cfg.model.hf_dir = model_dir
    cfg.tokenizer.path = model_dir
    cfg.model.dtype = "float32"
    cfg.model.max_seq_len = 384
    cfg.env.kwargs = {"num_tasks": 64}
    cfg.env.num_train_tasks = 64
    cfg.env.max_turns = 2
    cfg.rollout.tasks_per_iter = 4
    cfg.rollout.samples_per_task = 2  # 8 episodes: one per device of the (1, 8, 1) meshes
    cfg.rollout.max_new_tokens = 8
    cfg.rollout.max_total_tokens = 384
    cfg.rollout.max_in_flight = 8
    cfg.learner.num_minibatches = 1
    cfg.learner.num_microbatches = 1
    cfg.learner.lr = 1e-3
    cfg.learner.warmup_steps = 0  # the one update runs at the full learning rate
    cfg.learner.entropy_coef = 0.01  # a gradient even when every GRPO group has equal rewards
    cfg.train.iterations = 1
    cfg.train.checkpoint_every = 1
    cfg.eval.num_tasks = 2
    cfg.eval.splits = ("test",)
    cfg.eval.max_new_tokens = 8
    return cfg


def _check_one_iteration(workdir: str):
    rows = read_metrics(os.path.join(workdir, "logs"))
    losses = [r["learner/loss"] for r in rows if "learner/loss" in r]
    assert len(losses) == 1 and np.isfinite(losses[0])
    assert [r["learner/grad_norm"] > 0 for r in rows if "learner/grad_norm" in r] == [True]
    assert [r["step"] for r in rows if "learner/loss" in r] == [1]
    with Checkpointer(os.path.join(workdir, "checkpoints"), create=False) as ckpt:
        assert ckpt.all_steps() == [0, 1]
    summary = json.load(open(os.path.join(workdir, "summary.json")))
    assert summary["iterations"] == 1 and "eval/test/greedy/success" in summary["after"]
    # The eval entry point restores the step-1 checkpoint (HF-dir model config, the
    # config's own mesh) and, greedy, reproduces the run's final evaluation.
    report = evaluate_checkpoint(workdir, splits=["test"])
    assert report["step"] == 1 and report["splits"]["test/greedy"]["num_tasks"] == 2
    for key in ("success", "tokens_per_episode", "tool_calls_per_episode"):
        assert report["splits"]["test/greedy"][key] == pytest.approx(
            summary["after"][f"eval/test/greedy/{key}"]), key


@pytest.mark.slow
def test_gpu_qwen3_sglang_one_iteration_through_the_http_server(tiny_qwen3_dir, tmp_path):
    cfg = _shrink(_load("gpu_qwen3_sglang"), tiny_qwen3_dir)
    assert tuple(cfg.mesh.shape) == (1, 8, 1)  # the config's own 8-way fsdp mesh
    model_cfg, params = load_hf_checkpoint(tiny_qwen3_dir, dtype="float32")
    tok = C.build_tokenizer(cfg, str(tmp_path))
    engine = EmbeddedEngine(params, model_cfg, max_seq_len=cfg.model.max_seq_len, batch_buckets=(8,),
                            eos_token_ids=[tok.eos_id], steps_per_call=8, weight_version="start")
    with ServerThread(create_app(engine, model_path=tiny_qwen3_dir)) as server:
        cfg.rollout.sglang_urls = (server.url,)
        run_training(cfg, str(tmp_path / "run"))
    _check_one_iteration(str(tmp_path / "run"))
    # The server now serves the learner's step-1 export, loaded through /update_weights_from_disk.
    export = os.path.join(tmp_path, "run", "exports", "step_1")
    assert engine.weight_version == "1" and os.path.isfile(os.path.join(export, "config.json"))
    _, exported = load_hf_checkpoint(export)
    np.testing.assert_array_equal(np.asarray(engine.params["embed_tokens"]),
                                  np.asarray(exported["embed_tokens"]))
    assert not np.array_equal(np.asarray(exported["embed_tokens"]), np.asarray(params["embed_tokens"]))


@pytest.mark.slow
def test_tpu_qwen3_one_iteration_with_the_embedded_engine(tiny_qwen3_dir, tmp_path, monkeypatch):
    cfg = _shrink(_load("tpu_qwen3"), tiny_qwen3_dir)
    engines = []

    def build_engine(*args, **kwargs):
        engines.append(C_build_engine(*args, **kwargs))
        return engines[-1]

    C_build_engine = C.build_engine
    monkeypatch.setattr(C, "build_engine", build_engine)
    run_training(cfg, str(tmp_path / "run"))
    _check_one_iteration(str(tmp_path / "run"))
    assert engines[0].weight_version == "1"  # the run's engine, synced after the update
    assert len(engines) == 2  # and the one evaluate_checkpoint built
    mesh = engines[0].params["embed_tokens"].sharding.mesh
    assert dict(mesh.shape) == {"data": 1, "fsdp": 8, "tensor": 1}  # (1, -1, 1) filled the 8 devices
