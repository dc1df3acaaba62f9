"""Wall-clock split of one RL iteration of the CPU debug config, and tokens/s.

    python bench/bench_pipeline.py                    # short run into a temp dir
    python bench/bench_pipeline.py --workdir runs/cpu_debug   # summarize a finished run

Runs configs/cpu_debug.py with a short warm-start (the split of an RL
iteration does not depend on how well the policy was warm-started) and
reports the median over RL iterations (the first, which compiles, is left
out) of: rollout (actor + embedded engine + env), advantages (batching,
logprob recompute, estimator), learner (train_step), weight sync, the whole
iteration, and end-to-end tokens/s (tokens in the batch / iteration wall).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import statistics
import tempfile

import jax

KEYS = [("time/rollout_s", "rollout"), ("time/advantages_s", "advantages"), ("time/learner_s", "learner"),
        ("time/weight_sync_s", "weight sync"), ("time/iteration_s", "iteration")]


def _config(iterations: int):
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("cpu_debug", os.path.join(here, "..", "configs", "cpu_debug.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    config = mod.get_config()
    config.warmstart.steps = 20
    config.train.iterations = iterations
    config.eval.num_tasks = 8
    config.eval.samples_per_task = 0
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=None, help="summarize this finished run instead of running one")
    parser.add_argument("--iterations", type=int, default=6)
    args = parser.parse_args()
    from jaxrl_agent.pipeline.metrics import read_metrics

    workdir = args.workdir
    if workdir is None:
        from jaxrl_agent.pipeline.run import run_training

        workdir = tempfile.mkdtemp(prefix="bench_pipeline_")
        run_training(_config(args.iterations), workdir)
    rows = [r for r in read_metrics(os.path.join(workdir, "logs")) if "time/iteration_s" in r][1:]
    if not rows:
        raise SystemExit(f"no RL iterations after the first in {workdir}")
    med = {k: statistics.median(r[k] for r in rows) for k, _ in KEYS}
    tps = statistics.median(r["throughput/tokens_per_s"] for r in rows)
    print(f"# RL iteration split ({len(rows)} iterations, median), {datetime.date.today()}, "
          f"jax {jax.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print("| part | seconds | share |\n|---|---|---|")
    for k, name in KEYS:
        print(f"| {name} | {med[k]:.2f} | {100 * med[k] / med['time/iteration_s']:.0f}% |")
    print(f"\nend-to-end tokens/s (batch tokens / iteration wall): {tps:.0f}")


if __name__ == "__main__":
    main()
