"""The main job end to end on a shortened CPU debug config: in-process engine and SGLang over HTTP."""

import glob
import json
import math
import os

import jax
import matplotlib.image
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from jaxrl_agent.pipeline import components
from jaxrl_agent.pipeline.run import run_training
from jaxrl_agent.rollout.embedded import EmbeddedEngine
from jaxrl_agent.rollout.server import ServerThread, create_app
from jaxrl_agent.rollout.sglang_client import SGLangClient
from pipeline_helpers import (assert_finite_rl_rows, checkpoint_steps, jax_cache_dir, read_rows,  # noqa: F401
                              tiny_config)

ITERATIONS = 2
TB_TAGS = {"learner/loss", "rollout/reward_mean", "rollout/success", "eval/test/greedy/success", "sft/nll"}


def _tensorboard_tags(logdir: str) -> set[str]:
    assert glob.glob(os.path.join(logdir, "events.*")), f"no TensorBoard event file in {logdir}"
    acc = EventAccumulator(logdir)
    acc.Reload()
    tags = acc.Tags()
    return set(tags.get("scalars", [])) | set(tags.get("tensors", []))


def _check_workdir(workdir: str, summary: dict) -> list[dict]:
    """Checks shared by both engines; returns the RL rows."""
    rows = read_rows(workdir)
    rl = assert_finite_rl_rows(rows, ITERATIONS)
    assert any("sft/nll" in r for r in rows)  # warm-start ran and logged
    assert checkpoint_steps(workdir)[-1] == ITERATIONS
    assert os.path.exists(os.path.join(workdir, "config.json"))
    assert os.path.exists(os.path.join(workdir, "tokenizer", "tokenizer.json"))
    assert TB_TAGS <= _tensorboard_tags(os.path.join(workdir, "logs"))
    png = os.path.join(workdir, "learning_curve.png")
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(png)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    with open(os.path.join(workdir, "summary.json")) as f:
        on_disk = json.load(f)
    assert on_disk == json.loads(json.dumps(summary)) and on_disk["iterations"] == ITERATIONS
    for when in ("before", "after"):
        assert 0.0 <= on_disk[when]["eval/test/greedy/success"] <= 1.0
        assert math.isfinite(on_disk[when]["eval/test/greedy/reward_mean"])
    return rl


@pytest.mark.slow
def test_cpu_debug_run_embedded_engine(tmp_path, jax_cache_dir, capsys):
    workdir = str(tmp_path / "run")
    summary = run_training(tiny_config(**{"train.iterations": ITERATIONS}), workdir)
    _check_workdir(workdir, summary)
    out = capsys.readouterr().out
    assert "warm-start:" in out and "held-out test success (greedy): before RL" in out and "resumed" not in out


@pytest.mark.slow
def test_cpu_debug_run_through_sglang_server(tmp_path, jax_cache_dir):
    workdir = str(tmp_path / "run")
    config = tiny_config(**{"train.iterations": ITERATIONS})
    # The server starts with random weights of the shape the run builds (same
    # tokenizer -> same vocab); the run pushes its own weights as version 0
    # before the first rollout and version i after iteration i.
    tok = components.build_tokenizer(config, workdir)  # saved in workdir; the run reads it back
    model_cfg, params = components.load_model(config, tok, jax.random.key(123))
    engine = EmbeddedEngine(params, model_cfg, max_seq_len=config.model.max_seq_len,
                            batch_buckets=(16, 64, 128), eos_token_ids=[tok.eos_id], seed=0,
                            weight_version="random")
    with ServerThread(create_app(engine)) as server:
        config.rollout.engine = "sglang"
        config.rollout.sglang_urls = (server.url,)
        summary = run_training(config, workdir)
        with SGLangClient(server.url) as client:
            info = client.get_model_info()[0]
    _check_workdir(workdir, summary)
    assert info["weight_version"] == str(ITERATIONS)
    assert info["model_path"].startswith(os.path.join(workdir, "exports"))
