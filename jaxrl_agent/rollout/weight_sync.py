"""Weight sync from the learner to an engine through an HF safetensors directory.

`export_for_engine` writes `<root_dir>/step_<step>` atomically (hf_io writes a
temporary directory and renames it), so a server never reads a half-written
checkpoint, then prunes all but the newest `keep` exports. The engine loads it
with `update_weights_from_disk(path, weight_version=str(step))` (SGLang) or
`EmbeddedEngine.update_weights(path, ...)`.
"""

from __future__ import annotations

import os
import re
import shutil

from jaxrl_agent.models.config import ModelConfig
from jaxrl_agent.models.hf_io import save_hf_checkpoint

_EXPORT_RE = re.compile(r"^step_(\d+)$")


def export_for_engine(params, config: ModelConfig, root_dir: str | os.PathLike, step: int, *,
                      keep: int = 2, dtype: str | None = None) -> str:
    """Writes params as `<root_dir>/step_<step>` (config.json + *.safetensors).

    Args:
        params: the learner's params pytree (gathered to host by hf_io).
        config: its ModelConfig.
        root_dir: directory holding the exports (created if missing).
        step: learner step (>= 0); also the natural weight_version.
        keep: number of newest exports kept (>= 1); older step_* are removed.
        dtype: optional storage dtype, e.g. "bfloat16" for a bf16 SGLang server.

    Returns:
        The absolute path of the new export.

    Raises:
        ValueError: step < 0 or keep < 1 (and hf_io's errors for bad params).
    """
    if int(step) < 0:
        raise ValueError(f"step: expected >= 0, got {step}")
    if keep < 1:
        raise ValueError(f"keep: expected >= 1, got {keep}")
    root = os.path.abspath(os.fspath(root_dir))
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, f"step_{int(step)}")
    save_hf_checkpoint(params, config, path, dtype=dtype)
    exports = sorted(
        (int(m.group(1)), name) for name in os.listdir(root)
        if (m := _EXPORT_RE.match(name)) and os.path.isdir(os.path.join(root, name)))
    for _, name in exports[:-keep]:
        if os.path.join(root, name) != path:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    return path
