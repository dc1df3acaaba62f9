"""Resuming the main job: a stopped-and-restarted run matches an uninterrupted one; Ctrl-C checkpoints."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from jaxrl_agent.pipeline.components import ConfigError
from jaxrl_agent.pipeline.run import run_training
from pipeline_helpers import (REPO, assert_finite_rl_rows, checkpoint_steps, cli_overrides,  # noqa: F401
                              jax_cache_dir, read_rows, rl_rows, subprocess_env, tiny_config)

ITERATIONS = 3
# Wall-clock metrics differ between any two runs; everything else must not.
WALL_CLOCK = ("time/", "throughput/", "rollout/latency_s")
WALL_CLOCK_SUFFIXES = ("/latency_s", "/wall_s")


def _deterministic(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(WALL_CLOCK) and not k.endswith(WALL_CLOCK_SUFFIXES)}


@pytest.mark.slow
def test_stop_and_resume_matches_uninterrupted_run(tmp_path, jax_cache_dir, capsys):
    full, split = str(tmp_path / "full"), str(tmp_path / "split")
    run_training(tiny_config(**{"train.iterations": ITERATIONS}), full)
    run_training(tiny_config(**{"train.iterations": ITERATIONS - 1}), split)
    capsys.readouterr()
    summary = run_training(tiny_config(**{"train.iterations": ITERATIONS}), split)
    assert f"resumed from {os.path.join(split, 'checkpoints')} at iteration {ITERATIONS - 1}" in (
        capsys.readouterr().out)

    full_rows, split_rows = read_rows(full), read_rows(split)
    assert sum("sft/nll" in r for r in split_rows) == sum("sft/nll" in r for r in full_rows) > 0  # warm-start once
    full_rl = assert_finite_rl_rows(full_rows, ITERATIONS)
    split_rl = assert_finite_rl_rows(split_rows, ITERATIONS)
    # Bitwise: lockstep actor with per-iteration sampling seeds, restored
    # learner state, data-iterator state and weights; JSON floats round-trip exactly.
    assert [_deterministic(r) for r in split_rl] == [_deterministic(r) for r in full_rl]
    # Held-out eval before RL is carried in the checkpoint; after RL it is the same policy.
    with open(os.path.join(full, "summary.json")) as f:
        full_summary = json.load(f)
    assert _deterministic(summary["before"]) == _deterministic(full_summary["before"])
    assert _deterministic(summary["after"]) == _deterministic(full_summary["after"])

    # A finished run is a no-op that prints its summary again.
    capsys.readouterr()
    run_training(tiny_config(**{"train.iterations": ITERATIONS}), full)
    out = capsys.readouterr().out
    assert "run already complete" in out and "held-out test success (greedy): before RL" in out

    # Resuming with a config that changes what is trained is refused, naming the fields; config.json is kept.
    saved = open(os.path.join(split, "config.json")).read()
    with pytest.raises(ConfigError, match=r"learner\.lr: 0\.0001 -> 0\.03; .*warmstart\.guess_fraction: 0\.6 -> 0\.0"):
        run_training(tiny_config(**{"train.iterations": ITERATIONS + 1, "learner.lr": 0.03,
                                    "warmstart.guess_fraction": 0.0}), split)
    assert open(os.path.join(split, "config.json")).read() == saved


def _train_cmd(workdir: str, iterations: int) -> list[str]:
    return [sys.executable, "-m", "jaxrl_agent.train", "--config=configs/cpu_debug.py", f"--workdir={workdir}",
            *cli_overrides(**{"train.iterations": iterations, "warmstart.steps": 0,
                              "mesh.shape": "(-1,1,1)"})]


def _wait_for_rl_row(proc: subprocess.Popen, workdir: str, timeout_s: float) -> None:
    path = os.path.join(workdir, "logs", "metrics.jsonl")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        if os.path.exists(path) and rl_rows(read_rows(workdir)):
            return
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"no RL row within {timeout_s} s")


@pytest.mark.slow
def test_ctrl_c_saves_checkpoint_and_rerun_resumes(tmp_path, jax_cache_dir):
    workdir = str(tmp_path / "run")
    env = subprocess_env(jax_cache_dir)
    proc = subprocess.Popen(_train_cmd(workdir, 50), cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for_rl_row(proc, workdir, timeout_s=240)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    interrupted = int(out.split("interrupted: checkpoint saved at iteration ")[1].split()[0])
    assert interrupted >= 1 and checkpoint_steps(workdir)[-1] == interrupted
    # The checkpoint holds the state after `interrupted` updates: the iteration
    # that was cut left no row (else the rerun would repeat a logged iteration).
    assert [r["step"] for r in rl_rows(read_rows(workdir))] == list(range(1, interrupted + 1))

    rerun = subprocess.run(_train_cmd(workdir, interrupted + 1), cwd=REPO, env=env, text=True,
                           capture_output=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"at iteration {interrupted}" in rerun.stdout and "resumed from" in rerun.stdout
    assert checkpoint_steps(workdir)[-1] == interrupted + 1
    assert [r["step"] for r in rl_rows(read_rows(workdir))] == list(range(1, interrupted + 2))
