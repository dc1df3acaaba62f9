"""Evaluates a training run's checkpoint on held-out and out-of-distribution tasks.

    python -m jaxrl_agent.eval --workdir=runs/cpu_debug [--checkpoint=STEP | --checkpoint=DIR/checkpoints/STEP] \
        [--splits=test,ood] [--num_tasks=N] [--output=FILE.json] [--mesh_shape=-1,1,1]

Greedy decoding and sampling at config.eval.temperature (config.eval.samples_per_task
episodes per task), both with the embedded engine; prints a table (success, reward,
tool calls, tokens and latency per episode for each split and mode) and writes the
report as JSON (default WORKDIR/eval_<step>.json). Everything it calls lives
in jaxrl_agent.pipeline.evaluation.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging

from jaxrl_agent.pipeline.components import ConfigError
from jaxrl_agent.pipeline.evaluation import EvalInputError, evaluate_checkpoint, format_table, write_report

_WORKDIR = flags.DEFINE_string("workdir", None, "The --workdir of a training run.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Step number or checkpoints/<step> directory "
                                  "(default: the newest checkpoint of --workdir).")
_SPLITS = flags.DEFINE_list("splits", ["test", "ood"], "Task splits to evaluate.")
_NUM_TASKS = flags.DEFINE_integer("num_tasks", None, "Tasks per split (default: config.eval.num_tasks).")
_OUTPUT = flags.DEFINE_string("output", None, "JSON report path (default: WORKDIR/eval_<step>.json).")
_MESH_SHAPE = flags.DEFINE_list("mesh_shape", None, "data,fsdp,tensor mesh to restore onto "
                                "(default: the run's config.mesh.shape).")
flags.mark_flags_as_required(["workdir"])


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)  # orbax logs every restore at INFO
    try:
        mesh = None if _MESH_SHAPE.value is None else [int(s) for s in _MESH_SHAPE.value]
    except ValueError:
        raise app.UsageError(f"--mesh_shape: expected three ints, got {_MESH_SHAPE.value}") from None
    try:
        report = evaluate_checkpoint(_WORKDIR.value, checkpoint=_CHECKPOINT.value, splits=_SPLITS.value,
                                     num_tasks=_NUM_TASKS.value, mesh_shape=mesh)
    except (EvalInputError, ConfigError) as e:
        print(f"eval: error: {e}", file=sys.stderr)
        sys.exit(2)
    path = write_report(report, _OUTPUT.value or os.path.join(_WORKDIR.value, f"eval_{report['step']}.json"))
    print(format_table(report))
    print(f"report written to {path}")


if __name__ == "__main__":
    app.run(main)
