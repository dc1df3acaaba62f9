"""Shared fixtures for the main-job tests: a tiny, fast CPU debug config and log readers."""

from __future__ import annotations

import importlib.util
import json
import math
import os
from typing import Any, Iterator

import jax
import pytest
from ml_collections import config_dict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_DEBUG = os.path.join(REPO, "configs", "cpu_debug.py")

# Small enough for a few seconds per RL iteration on 2 CPU cores; the shapes are
# shared by every test here, so jit caches are reused within one pytest process.
TINY_OVERRIDES: dict[str, Any] = {
    "model.hidden_size": 32,
    "model.intermediate_size": 64,
    "model.num_layers": 1,
    "model.num_heads": 2,
    "model.num_kv_heads": 1,
    "model.head_dim": 16,
    "warmstart.steps": 10,
    "warmstart.num_demos": 32,
    "warmstart.batch_size": 16,
    "warmstart.warmup_steps": 2,
    "rollout.tasks_per_iter": 4,
    "rollout.samples_per_task": 2,
    "learner.num_minibatches": 1,
    "mesh.shape": (-1, 1, 1),  # all devices on the data axis (8 fake CPU devices in tests)
    "train.iterations": 2,
    "train.checkpoint_every": 1,
    "eval.num_tasks": 4,
}


def load_cpu_debug() -> config_dict.ConfigDict:
    """configs/cpu_debug.py's get_config(), loaded from its file (configs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("cpu_debug_config", CPU_DEBUG)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def tiny_config(**overrides: Any) -> config_dict.ConfigDict:
    """The CPU debug config shrunk by TINY_OVERRIDES, then `overrides` applied.

    Keys are dotted field paths with "." written as "__" (e.g.
    `train__iterations=3`) or passed through a dict: `tiny_config(**{"train.iterations": 3})`.
    Unknown fields raise (the ConfigDict is locked), as a bad override on the
    command line would. Returns a locked ConfigDict.

    Raises:
      AttributeError / KeyError: an override names a field the config lacks.
    """
    config = load_cpu_debug()
    config.lock()
    for key, value in {**TINY_OVERRIDES, **overrides}.items():
        set_field(config, key.replace("__", "."), value)
    return config


def set_field(config: config_dict.ConfigDict, dotted: str, value: Any) -> None:
    """config.<dotted> = value; a new leaf only where the config is unlocked."""
    *parents, leaf = dotted.split(".")
    node = config
    for name in parents:
        node = node[name]
    node[leaf] = value


def cli_overrides(**overrides: Any) -> list[str]:
    """`--config.<field>=<value>` flags for TINY_OVERRIDES plus `overrides` (dotted keys)."""
    merged = {**TINY_OVERRIDES, **{k.replace("__", "."): v for k, v in overrides.items()}}
    return [f"--config.{k}={v}" for k, v in merged.items()]


def read_rows(workdir: str) -> list[dict]:
    """All rows of `<workdir>/logs/metrics.jsonl`, in file order."""
    with open(os.path.join(workdir, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def rl_rows(rows: list[dict]) -> list[dict]:
    """The rows written by RL iterations (they carry learner/* metrics)."""
    return [r for r in rows if any(k.startswith("learner/") for k in r)]


def checkpoint_steps(workdir: str) -> list[int]:
    """Iterations with a checkpoint directory under `<workdir>/checkpoints`."""
    root = os.path.join(workdir, "checkpoints")
    if not os.path.isdir(root):
        return []
    return sorted(int(d) for d in os.listdir(root) if d.isdigit())


# Every run_training call builds fresh jitted closures (learner, SFT step,
# engine), so each run would recompile everything; the persistent compilation
# cache turns those recompiles (and the CLI subprocesses' ones) into disk reads.
CACHE_MIN_COMPILE_S = 0.1


@pytest.fixture(scope="session")
def jax_cache_dir(tmp_path_factory) -> Iterator[str]:
    """A JAX persistent compilation cache shared by the main-job tests.

    Set for this process (restored afterwards) and exported in env for
    subprocesses via `subprocess_env()`. The path is the same for every test
    module of a pytest session, so later modules hit earlier compilations.
    """
    from jax.experimental.compilation_cache import compilation_cache

    path = str(tmp_path_factory.getbasetemp() / "jax_compilation_cache")
    before = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_S)
    compilation_cache.reset_cache()  # re-read the settings even if something compiled before
    yield path
    jax.config.update("jax_compilation_cache_dir", before[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])
    compilation_cache.reset_cache()


def subprocess_env(cache_dir: str) -> dict[str, str]:
    """os.environ (8 fake CPU devices from conftest) plus the shared compilation cache."""
    env = dict(os.environ)
    env["JAX_COMPILATION_CACHE_DIR"] = cache_dir
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = str(CACHE_MIN_COMPILE_S)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def assert_finite_rl_rows(rows: list[dict], iterations: int) -> list[dict]:
    """The RL rows of a sync run: one per iteration 1..iterations, each with a
    finite loss, rollout rewards and zero policy lag. Returns them."""
    rl = rl_rows(rows)
    assert [r["step"] for r in rl] == list(range(1, iterations + 1))
    for r in rl:
        assert math.isfinite(r["learner/loss"]) and math.isfinite(r["learner/grad_norm"]), r
        assert math.isfinite(r["rollout/reward_mean"]) and 0.0 <= r["rollout/success"] <= 1.0, r
        # Sync mode: iteration i rolls out with weights version i, which the
        # engine received at the end of iteration i - 1 (version 0 = warm start).
        assert r["async/policy_lag"] == 0, r
    return rl
