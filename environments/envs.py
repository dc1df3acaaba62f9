"""The registered tool environments: calculator arithmetic, code repair, search, HumanEval."""

from __future__ import annotations

from typing import Any

from jaxrl_agent.environments.base import ToolEnv
from jaxrl_agent.environments.tasks import arithmetic, code_repair, humaneval, retrieval
from jaxrl_agent.environments.tasks.base import Task
from jaxrl_agent.environments.tools import Calculator, PythonExecutor, SandboxLimits, Search
from jaxrl_agent.environments.verifiers import exact_match, extract_code, numeric_match, run_tests


class CalculatorEnv(ToolEnv):
    """Multi-step arithmetic word problems with a `calculator` tool (numeric-tolerance verifier).

    Args:
        num_tasks: tasks generated for the split (arithmetic.generate), >= 1.
        task_seed: generation seed of the task list (distinct from reset's seed,
            which picks tasks from it).
        **kwargs: ToolEnv arguments (split, max_turns, rewards, render_mode).

    Raises:
        ValueError: num_tasks is not an int >= 1.
    """

    instructions = "You are a helpful assistant that solves arithmetic word problems with a calculator tool."

    def __init__(self, num_tasks: int = 1000, task_seed: int = 0, max_turns: int = 6, **kwargs: Any):
        if isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1:
            raise ValueError(f"num_tasks: expected an int >= 1, got {num_tasks!r}")
        self.num_tasks, self.task_seed = num_tasks, task_seed
        super().__init__(max_turns=max_turns, **kwargs)

    def _load_tasks(self, split: str) -> list[Task]:
        if split == "test" or split == "ood":
            return arithmetic.generate(split, min(self.num_tasks, 200), self.task_seed)
        return arithmetic.generate(split, self.num_tasks, self.task_seed)

    def _make_tools(self):
        return [Calculator()]

    def _verify(self, task: Task, answer: str) -> bool:
        return numeric_match(answer, task.answer)


class SearchEnv(ToolEnv):
    """Questions about the bundled corpus with a BM25 `search` tool (normalised exact match)."""

    instructions = "You are a helpful assistant that answers questions by searching an encyclopedia."

    def __init__(self, task_seed: int = 0, max_turns: int = 4, **kwargs: Any):
        self.task_seed = task_seed
        super().__init__(max_turns=max_turns, **kwargs)

    def _load_tasks(self, split: str) -> list[Task]:
        return retrieval.generate(split, self.task_seed)

    def _make_tools(self):
        return [Search()]

    def _verify(self, task: Task, answer: str) -> bool:
        return exact_match(answer, task.answer)


class _CodeEnv(ToolEnv):
    """Shared by the coding envs: a `python` tool and a tests-pass verifier."""

    instructions = "You are a helpful assistant that writes and fixes Python code. You can run code with the python tool."
    _tasks_module: Any = None

    def __init__(self, max_turns: int = 4, sandbox_limits: SandboxLimits = SandboxLimits(), **kwargs: Any):
        self.sandbox_limits = sandbox_limits
        super().__init__(max_turns=max_turns, **kwargs)

    def _make_tools(self):
        return [PythonExecutor(self.sandbox_limits)]

    def _verify(self, task: Task, answer: str) -> bool:
        passed, _ = run_tests(self._tasks_module.test_program(extract_code(answer), task), self.sandbox_limits)
        return passed


class CodeRepairEnv(_CodeEnv):
    """Fix a buggy function; the submission must pass the task's asserts in the sandbox."""

    _tasks_module = code_repair

    def _load_tasks(self, split: str) -> list[Task]:
        return code_repair.generate(split)


class HumanEvalEnv(_CodeEnv):
    """HumanEval problems (split "test" only), verified by each problem's `check(candidate)`."""

    _tasks_module = humaneval

    def __init__(self, split: str = "test", **kwargs: Any):
        super().__init__(split=split, **kwargs)

    def _load_tasks(self, split: str) -> list[Task]:
        return humaneval.generate(split)
