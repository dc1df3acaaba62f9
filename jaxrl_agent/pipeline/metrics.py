"""Run metrics: TensorBoard event files, a JSON-lines log and the final plot.

TensorBoard logs are written with `tensorboard.summary.Writer`, which needs
no TensorFlow. Only the main process (process 0) writes.
"""

from __future__ import annotations

import json
import math
import os
from typing import Mapping

import numpy as np


class MetricsWriter:
    """Writes scalars to TensorBoard and `<workdir>/metrics.jsonl`.

    Args:
      logdir: directory for event files and metrics.jsonl (created).
      enabled: False on non-main processes: every call is then a no-op.
    """

    def __init__(self, logdir: str, *, enabled: bool = True):
        self.logdir = logdir
        self.enabled = enabled
        self._writer = None
        self._jsonl = None
        self.lines = 0  # rows in metrics.jsonl (existing ones included): checkpoints record it
        self._path = os.path.join(logdir, "metrics.jsonl")
        if enabled:
            from tensorboard.summary import Writer

            os.makedirs(logdir, exist_ok=True)
            self._writer = Writer(logdir)
            if os.path.exists(self._path):
                with open(self._path, encoding="utf-8") as f:
                    self.lines = sum(1 for _ in f)
            self._jsonl = open(self._path, "a", encoding="utf-8")

    def truncate(self, lines: int) -> None:
        """Keeps the first `lines` rows of metrics.jsonl (a resume drops rows
        logged after its checkpoint). TensorBoard event files are append-only:
        TensorBoard shows a re-logged step twice there."""
        if not self.enabled or lines >= self.lines:
            return
        with open(self._path, "rb") as f:
            keep = b"".join(f.readline() for _ in range(lines))
        os.truncate(self._path, len(keep))
        self.lines = lines

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        """Logs each finite scalar under its name at `step`."""
        if not self.enabled:
            return
        clean = {}
        for name, value in scalars.items():
            v = float(np.asarray(value))
            if math.isfinite(v):
                clean[name] = v
                self._writer.add_scalar(name, v, step=int(step))
        self._jsonl.write(json.dumps({"step": int(step), **clean}) + "\n")
        self._jsonl.flush()
        self.lines += 1
        self._writer.flush()

    def close(self) -> None:
        if self.enabled:
            self._writer.close()
            self._jsonl.close()
            self.enabled = False


def read_metrics(logdir: str) -> list[dict]:
    """Reads back `<logdir>/metrics.jsonl` as a list of dicts (step order)."""
    path = os.path.join(logdir, "metrics.jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no metrics log at {path}")
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return sorted(rows, key=lambda r: r["step"])


def plot_learning_curve(rows: list[dict], keys: list[str], path: str, *, title: str = "") -> str:
    """Plots `keys` against step from metrics rows into a PNG at `path`.

    Raises:
      ValueError: none of `keys` appears in `rows`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = [k for k in keys if any(k in r for r in rows)]
    if not present:
        raise ValueError(f"keys: none of {keys} is in the metrics rows")
    fig, axes = plt.subplots(len(present), 1, figsize=(7, 2.4 * len(present)), sharex=True)
    axes = np.atleast_1d(axes)
    for ax, key in zip(axes, present):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=2)
        ax.set_ylabel(key.split("/")[-1])
        ax.set_title(key, fontsize=9)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return path
