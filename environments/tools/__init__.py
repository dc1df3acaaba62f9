"""Tools callable by the policy: calculator, sandboxed Python, BM25 search."""

from jaxrl_agent.environments.tools.base import MAX_RESULT_CHARS, Tool, ToolError, ToolResult
from jaxrl_agent.environments.tools.calculator import Calculator
from jaxrl_agent.environments.tools.python_executor import PythonExecutor
from jaxrl_agent.environments.tools.sandbox import SandboxLimits, SandboxResult, isolation, run_python
from jaxrl_agent.environments.tools.search import Search

__all__ = [
    "MAX_RESULT_CHARS", "Tool", "ToolError", "ToolResult", "Calculator", "PythonExecutor",
    "SandboxLimits", "SandboxResult", "isolation", "run_python", "Search",
]
