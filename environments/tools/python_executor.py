"""`python` tool: runs model-written code in the sandbox of `sandbox.py`."""

from __future__ import annotations

from jaxrl_agent.agent.tool_calls import ToolSpec
from jaxrl_agent.environments.tools.base import MAX_RESULT_CHARS, Tool, ToolError
from jaxrl_agent.environments.tools.sandbox import SandboxLimits, SandboxResult, run_python


def _clip(text: str, total_bytes: int, limit: int, budget: int) -> str:
    """The first `limit` chars of one output stream, with a marker when anything was cut.

    Args:
        text: the stream as the sandbox returned it (its first `budget` bytes, decoded).
        total_bytes: bytes the program wrote to that stream.
        limit: chars kept here (so the marker survives the tool's result cap).
        budget: the sandbox's max_output_bytes.
    """
    shown = text[:limit]
    if len(shown) == len(text) and total_bytes <= budget:
        return shown
    shown_bytes = min(len(shown.encode("utf-8", "replace")), total_bytes)
    return f"{shown}\n[output truncated: {total_bytes} bytes, showing the first {shown_bytes}]"


def _observation(result: SandboxResult, budget: int) -> tuple[str, str]:
    """(stdout, stderr) of a run, each clipped with a truncation marker, together under MAX_RESULT_CHARS."""
    streams = sum(1 for n in (result.stdout_bytes, result.stderr_bytes) if n)
    limit = (MAX_RESULT_CHARS - 256) // max(streams, 1)
    return (_clip(result.stdout, result.stdout_bytes, limit, budget),
            _clip(result.stderr, result.stderr_bytes, limit, budget))


class PythonExecutor(Tool):
    """Executes a Python program in a fresh sandbox; returns its stdout.

    A program that exits non-zero, times out or is killed raises ToolError with
    its (truncated) stdout/stderr, so the model sees what went wrong and the
    call does not count as a successful one. Output cut to fit (the sandbox's
    max_output_bytes, then the tool result cap) ends with a marker
    "[output truncated: N bytes, showing the first M]".
    """

    spec = ToolSpec(
        name="python",
        description=(
            "Run a Python 3 program in a fresh sandbox (no network, no files kept between calls) "
            "and return what it prints. Use print() to see values."
        ),
        parameters={
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The full program to run.", "maxLength": 16000}
            },
            "required": ["code"],
        },
    )

    def __init__(self, limits: SandboxLimits = SandboxLimits()):
        self.limits = limits

    def run(self, code: str) -> str:
        result = run_python(code, self.limits)
        stdout, stderr = _observation(result, self.limits.max_output_bytes)
        if result.timed_out:
            raise ToolError(f"timed out after {self.limits.timeout_s:g} s\n{stdout}{stderr}".rstrip())
        if result.returncode != 0:
            raise ToolError(f"exit code {result.returncode}\n{stdout}{stderr}".rstrip())
        out = stdout + (f"\n[stderr]\n{stderr}" if stderr else "")
        return out if out.strip() else "(no output)"
