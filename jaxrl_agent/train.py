"""The main job: agentic RL training (warm-start, RL, evaluation).

    python -m jaxrl_agent.train --config=configs/cpu_debug.py --workdir=runs/cpu_debug \
        [--config.learner.lr=3e-4 ...]

Running it again with the same --workdir resumes from the newest checkpoint;
Ctrl-C saves a checkpoint first. Everything it calls lives in
jaxrl_agent.pipeline and is importable and testable on its own.
"""

from __future__ import annotations

import re
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from jaxrl_agent.pipeline.components import ConfigError
from jaxrl_agent.pipeline.run import run_training

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/*.py file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, logs and results.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
    try:
        run_training(_CONFIG.value, _WORKDIR.value)
    except ConfigError as e:
        raise app.UsageError(str(e)) from e
    except KeyboardInterrupt:  # Ctrl-C outside the RL loop (warm-start, evaluation): nothing to save
        print("\ninterrupted (no checkpoint: Ctrl-C during RL saves one; see README)", file=sys.stderr)
        raise SystemExit(130) from None


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing; a --config.X override naming no config field exits with
    a one-line error (ml_collections raises KeyError/AttributeError deep inside)."""
    try:
        return flags.FLAGS(argv)
    except (KeyError, AttributeError) as e:
        bad = [a.split("=", 1)[0] for a in argv[1:] if a.startswith("--config.")]
        hint = re.search(r'Did you mean "[^"]+" instead of "[^"]+"\?', str(e))
        print(f"error: a --config override names no field of the config ({', '.join(bad)})"
              + (f": {hint.group(0)}" if hint else ""), file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
