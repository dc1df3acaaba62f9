"""Runs a Python snippet in a fresh CPU-only interpreter (for process-wide JAX flags such as x64)."""

from __future__ import annotations

import os
import subprocess
import sys


def run_python(code: str, env: dict[str, str] | None = None,
               timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -c code` with JAX_PLATFORMS=cpu (plus `env`); returns the finished process (text)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})})


def assert_prints_ok(code: str, env: dict[str, str] | None = None) -> None:
    """Runs `code` (which ends with print('ok')) and fails with its stderr unless it printed ok."""
    out = run_python(code, env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
