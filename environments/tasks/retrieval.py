"""Retrieval questions answered from the bundled search corpus.

Questions (environments/data/retrieval_questions.jsonl) ask one fact about a
fictional town or inventor of environments/data/search_corpus.jsonl. Splits:
single-hop questions go to train/test by the hash of their entity (so no
entity is shared between train and test); ood holds the two-hop questions
("which river flows through the town where X was born?"), which need two
searches.
"""

from __future__ import annotations

import numpy as np

from jaxrl_agent.agent.tool_calls import format_answer, format_tool_call
from jaxrl_agent.environments.tasks.base import Task, check_split, in_distribution_split
from jaxrl_agent.environments.tools.search import load_jsonl

TEST_FRACTION = 0.25


def all_tasks() -> list[Task]:
    """Every retrieval question with its split."""
    out = []
    for i, q in enumerate(load_jsonl("retrieval_questions.jsonl")):
        two_hop = q["kind"].startswith("two_hop")
        split = "ood" if two_hop else in_distribution_split(f"entity:{q['entity']}", TEST_FRACTION)
        queries = (q["query"], q["hop_query"]) if two_hop else (q["query"],)
        slug = q["entity"].lower().replace(" ", "_")
        out.append(Task(task_id=f"search-{q['kind']}-{slug}", split=split,
                        prompt=q["question"] + " Use the search tool; answer with just the name or number.",
                        answer=q["answer"], metadata={"kind": q["kind"], "entity": q["entity"], "queries": queries}))
    return out


def generate(split: str, seed: int = 0) -> list[Task]:
    """The tasks of one split, in an order shuffled by `seed` (reproducible).

    Raises:
        ValueError: unknown split.
    """
    check_split(split)
    tasks = [t for t in all_tasks() if t.split == split]
    order = np.random.default_rng(seed).permutation(len(tasks))
    return [tasks[i] for i in order]


def gold_actions(task: Task) -> list[str]:
    """Demonstration: one search per hop, then the answer."""
    return [format_tool_call("search", {"query": q}) for q in task.metadata["queries"]] + [format_answer(task.answer)]
