"""Shared fixtures for the main-job tests: a tiny, fast CPU debug config and log readers."""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any

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
