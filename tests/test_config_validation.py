"""Invalid main-job configs fail at start-up, before heavy work, with the field named."""

import os
import re
import subprocess
import sys
import time

import pytest

from jaxrl_agent.learner.hparams import ESTIMATORS
from jaxrl_agent.pipeline.components import ConfigError
from jaxrl_agent.pipeline.run import run_training
from pipeline_helpers import REPO, set_field, tiny_config


def _fails(tmp_path, overrides: dict, new_fields: dict | None = None) -> str:
    """The ConfigError message of run_training on tiny_config(**overrides) (+ new, unlocked fields).

    Also checks that nothing heavy ran: no tokenizer trained, no checkpoint written.
    """
    config = tiny_config(**overrides)
    with config.unlocked():
        for key, value in (new_fields or {}).items():
            set_field(config, key, value)
    workdir = tmp_path / "run"
    with pytest.raises(ConfigError) as err:
        run_training(config, str(workdir))
    assert not (workdir / "tokenizer").exists() and not (workdir / "checkpoints").exists()
    return str(err.value)


@pytest.mark.parametrize("overrides, new_fields, pattern", [
    ({"learner.estimator": "nope"}, None, r"config\.learner\.estimator: unknown value 'nope'; expected one of "),
    ({}, {"learner.clip_ratio": 0.2}, r"config\.learner\.clip_ratio: unknown field; expected one of .*'clip_low'"),
    ({"mesh.shape": (3, 1, 1)}, None, r"config\.mesh\.shape: .*\(3, 1, 1\).*8 devices"),
    ({"rollout.tasks_per_iter": 3, "rollout.samples_per_task": 2}, None,
     r"config\.rollout\.tasks_per_iter: .*6 episodes is not divisible by the data-parallel size 8"),
    ({"env.id": "jaxrl_agent/NoSuchEnv-v0"}, None,
     r"config\.env\.id: 'jaxrl_agent/NoSuchEnv-v0' is not registered; expected one of \[.*'jaxrl_agent/Calculator-v0'"),
    ({"rollout.engine": "sglang"}, None, r"config\.rollout\.sglang_urls: engine 'sglang' needs at least one"),
    ({"rollout.engine": "vllm"}, None, r"config\.rollout\.engine: unknown engine 'vllm'"),
    ({"train.stale_policy": "keep"}, None, r"config\.train\.stale_policy: expected one of \['drop', 'tis'\]"),
    ({"train.iterations": 0}, None, r"config\.train\.iterations: expected an int >= 1, got 0"),
], ids=["estimator", "unknown_learner_field", "mesh_vs_devices", "batch_vs_mesh", "env_id",
        "sglang_without_urls", "engine", "stale_policy", "iterations"])
def test_invalid_config_names_the_field(tmp_path, overrides, new_fields, pattern):
    assert re.search(pattern, _fails(tmp_path, overrides, new_fields)), pattern


def test_unknown_estimator_lists_the_valid_ones(tmp_path):
    message = _fails(tmp_path, {"learner.estimator": "nope"})
    assert all(repr(name) in message for name in ESTIMATORS)


def test_cli_rejects_unknown_estimator_quickly(tmp_path):
    env = dict(os.environ)  # one CPU device, as a user's shell has (conftest forces 8)
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                                if not f.startswith("--xla_force_host_platform_device_count"))
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "jaxrl_agent.train", "--config=configs/cpu_debug.py",
         f"--workdir={tmp_path / 'run'}", "--config.learner.estimator=nope"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    assert "config.learner.estimator: unknown value 'nope'" in proc.stderr and "'grpo'" in proc.stderr
    assert "Traceback" not in proc.stderr  # a usage error, not a crash
    assert not (tmp_path / "run" / "tokenizer").exists()
    assert elapsed < 60, f"took {elapsed:.1f} s to reject the config"


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"eval.splits": ("bogus",)}, "config.eval.splits"),
        ({"rollout.max_new_tokens": 0}, "config.rollout.max_new_tokens"),
        ({"rollout.temperature": -1.0}, "config.rollout.temperature"),
        ({"model.num_heads": 3, "model.num_kv_heads": 2}, "config.model.num_heads"),
        ({"tokenizer.vocab_size": 10}, "config.tokenizer.vocab_size"),
        ({"warmstart.guess_fraction": 1.0}, "config.warmstart.guess_fraction"),
        ({"warmstart.lr": -1e-3}, "config.warmstart.lr"),
        ({"env.num_train_tasks": 5000}, "config.env.num_train_tasks"),
        ({"warmstart.steps": -5}, "config.warmstart.steps"),
        ({"warmstart.batch_size": 64}, "config.warmstart.batch_size"),
    ],
)
def test_more_fields_fail_at_start_up(tmp_path, overrides, field):
    """Found by a fresh-eyes review: these used to fail late, with raw tracebacks."""
    from pipeline_helpers import tiny_config

    from jaxrl_agent.pipeline.components import ConfigError
    from jaxrl_agent.pipeline.run import run_training

    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        run_training(tiny_config(**overrides), str(tmp_path / "run"))
    assert not (tmp_path / "run" / "tokenizer").exists()


def test_workdir_that_is_a_file(tmp_path):
    from pipeline_helpers import tiny_config

    from jaxrl_agent.pipeline.components import ConfigError
    from jaxrl_agent.pipeline.run import run_training

    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(ConfigError, match="--workdir"):
        run_training(tiny_config(), str(path))


def test_more_demonstrations_than_train_tasks(tmp_path):
    from pipeline_helpers import tiny_config

    from jaxrl_agent.pipeline.components import ConfigError
    from jaxrl_agent.pipeline.run import run_training

    config = tiny_config(**{"warmstart.num_demos": 5000})
    with pytest.raises(ConfigError, match=r"config\.warmstart\.num_demos: 5000 exceeds the 1000 tasks"):
        run_training(config, str(tmp_path / "run"))
    assert not list((tmp_path / "run" / "checkpoints").glob("*"))  # nothing saved


def test_is_correction_none_from_the_command_line():
    from pipeline_helpers import tiny_config

    from jaxrl_agent.pipeline.components import learner_hparams

    for value in ("None", "none", ""):
        assert learner_hparams(tiny_config(**{"learner.is_correction": value}), 10).is_correction is None
    assert learner_hparams(tiny_config(), 10).is_correction == "tis"


def test_cli_typo_in_a_field_name_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "jaxrl_agent.train", "--config=configs/cpu_debug.py",
         f"--workdir={tmp_path / 'run'}", "--config.learner.lrr=1e-4"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--config.learner.lrr" in proc.stderr and 'Did you mean "lr" instead of "lrr"?' in proc.stderr
    assert "Traceback" not in proc.stderr


def test_native_advantage_method_without_a_compiler_fails_at_start_up(tmp_path, monkeypatch):
    """The native kernel is built before the warm-start; a failure names the field and the fix."""
    from jaxrl_agent import native

    monkeypatch.setattr(native, "_STATE", {})
    monkeypatch.setenv("JAXRL_AGENT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    cfg = tiny_config()
    set_field(cfg, "learner.estimator", "gae")
    set_field(cfg, "learner.advantage_method", "native")
    t0 = time.time()
    with pytest.raises(ConfigError, match="config.learner.advantage_method: 'native' cannot run here "
                                          r"\(method='native' needs a C\+\+17 compiler.*use 'blocked'"):
        run_training(cfg, str(tmp_path / "run"))
    assert time.time() - t0 < 30  # before any model or warm-start work
    assert not os.path.exists(tmp_path / "run")
