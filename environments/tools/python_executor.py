"""`python` tool: runs model-written code in the sandbox of `sandbox.py`."""

from __future__ import annotations

from jaxrl_agent.agent.tool_calls import ToolSpec
from jaxrl_agent.environments.tools.base import Tool, ToolError
from jaxrl_agent.environments.tools.sandbox import SandboxLimits, run_python


class PythonExecutor(Tool):
    """Executes a Python program in a fresh sandbox; returns its stdout.

    A program that exits non-zero, times out or is killed raises ToolError with
    its (truncated) stdout/stderr, so the model sees what went wrong and the
    call does not count as a successful one.
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
        if result.timed_out:
            raise ToolError(f"timed out after {self.limits.timeout_s:g} s\n{result.stdout}{result.stderr}".rstrip())
        if result.returncode != 0:
            raise ToolError(f"exit code {result.returncode}\n{result.stdout}{result.stderr}".rstrip())
        out = result.stdout + (f"\n[stderr]\n{result.stderr}" if result.stderr else "")
        return out if out.strip() else "(no output)"
