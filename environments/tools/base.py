"""The tool interface: a spec shown to the model and a `run` that may fail.

A tool never crashes an episode: `Tool.__call__` turns any exception raised
by `run` into an error string (`ToolResult.ok` false), and measures latency.
"""

from __future__ import annotations

import abc
import dataclasses
import time
from typing import Any

from jaxrl_agent.agent.tool_calls import ToolSpec

MAX_RESULT_CHARS = 4096  # a tool result longer than this is cut (with a marker)


class ToolError(Exception):
    """Raised by `Tool.run` for a failure whose message the model should read."""


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """Outcome of one tool call.

    Attributes:
        text: what the model sees (the result, or "Error: ...").
        ok: False when the tool raised, timed out or refused the input.
        latency_s: wall-clock seconds spent in the tool.
    """

    text: str
    ok: bool
    latency_s: float


class Tool(abc.ABC):
    """Base class: subclasses set `spec` and implement `run(**arguments) -> str`."""

    spec: ToolSpec

    @property
    def name(self) -> str:
        return self.spec.name

    @abc.abstractmethod
    def run(self, **arguments: Any) -> str:
        """Executes the tool on validated arguments; raises ToolError on failure."""

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        """Runs the tool; any exception becomes an error result, never propagates."""
        start = time.perf_counter()
        try:
            text, ok = self.run(**arguments), True
        except ToolError as e:
            text, ok = f"Error: {e}", False
        except Exception as e:  # noqa: BLE001  (a failing tool is an observation, not a crash)
            text, ok = f"Error: {self.name} failed with {type(e).__name__}: {e}", False
        if len(text) > MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + f"\n... [truncated {len(text) - MAX_RESULT_CHARS} chars]"
        return ToolResult(text=text, ok=ok, latency_s=time.perf_counter() - start)
