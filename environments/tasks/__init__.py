"""Task sets: arithmetic word problems, code repair, retrieval, HumanEval."""

from jaxrl_agent.environments.tasks import arithmetic, code_repair, humaneval, retrieval
from jaxrl_agent.environments.tasks.base import SPLITS, Task, check_split, hash_bucket

__all__ = ["arithmetic", "code_repair", "humaneval", "retrieval", "SPLITS", "Task", "check_split", "hash_bucket"]
