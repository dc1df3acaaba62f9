"""Gymnasium tool environments, tools and task sets (installed as `jaxrl_agent.environments`).

Importing this package registers, with gymnasium:

    jaxrl_agent/Calculator-v0   arithmetic word problems + calculator
    jaxrl_agent/CodeRepair-v0   buggy functions + python sandbox
    jaxrl_agent/Search-v0       questions about a bundled corpus + BM25 search
    jaxrl_agent/HumanEval-v0    HumanEval + python sandbox

so `gymnasium.make("jaxrl_agent/Calculator-v0", split="test")` works.
"""

import gymnasium

from jaxrl_agent.environments.base import CHARSET, MAX_OBS_CHARS, ToolEnv, to_observation
from jaxrl_agent.environments.envs import CalculatorEnv, CodeRepairEnv, HumanEvalEnv, SearchEnv
from jaxrl_agent.environments.rewards import RewardConfig
from jaxrl_agent.environments.tasks import SPLITS, Task

ENV_IDS = {
    "jaxrl_agent/Calculator-v0": "jaxrl_agent.environments.envs:CalculatorEnv",
    "jaxrl_agent/CodeRepair-v0": "jaxrl_agent.environments.envs:CodeRepairEnv",
    "jaxrl_agent/Search-v0": "jaxrl_agent.environments.envs:SearchEnv",
    "jaxrl_agent/HumanEval-v0": "jaxrl_agent.environments.envs:HumanEvalEnv",
}

for _env_id, _entry_point in ENV_IDS.items():
    if _env_id not in gymnasium.registry:
        # No TimeLimit wrapper: ToolEnv truncates at max_turns itself.
        gymnasium.register(id=_env_id, entry_point=_entry_point)


def gold_actions(task: Task) -> list[str]:
    """The demonstration actions (tool calls, then the answer) for a task of any task set.

    Raises:
        ValueError: for a task id of no known task set.
    """
    from jaxrl_agent.environments.tasks import arithmetic, code_repair, humaneval, retrieval

    for prefix, module in (("arith-", arithmetic), ("repair-", code_repair), ("search-", retrieval),
                           ("HumanEval/", humaneval)):
        if task.task_id.startswith(prefix):
            return module.gold_actions(task)
    raise ValueError(f"task.task_id: {task.task_id!r} belongs to no known task set")


__all__ = [
    "CHARSET", "MAX_OBS_CHARS", "ToolEnv", "to_observation", "CalculatorEnv", "CodeRepairEnv", "HumanEvalEnv",
    "SearchEnv", "RewardConfig", "SPLITS", "Task", "ENV_IDS", "gold_actions",
]
