"""Multi-step arithmetic word problems that need at least two calculator calls.

Templated sentences with small integers, so that a tiny model trained from
scratch can learn the pattern "one calculator call per intermediate quantity,
then combine, then answer". `gold_actions` gives the demonstration (one tool
call per turn, then `<answer>`), for supervised warm-start.

Splits: train/test use operands 2..12 and four two-/three-step templates,
split 80/20 by the hash of (template, operands); ood uses operands 13..60 and
adds a four-step template, so it is disjoint from both by construction.
"""

from __future__ import annotations

import numpy as np

from jaxrl_agent.agent.tool_calls import format_answer, format_tool_call
from jaxrl_agent.environments.tasks.base import Task, check_split, in_distribution_split

NAMES = ("Ann", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "June")
TEST_FRACTION = 0.2
SMALL = (2, 12)  # inclusive operand range of train/test
LARGE = (13, 60)  # inclusive operand range of ood


def _steps(template: int, nums: tuple[int, ...]) -> tuple[str, list[str], int]:
    """Returns (sentence with {name}, calculator expressions in order, answer)."""
    if template == 0:
        a, b, c, d = nums
        r1, r2 = a * b, c * d
        text = (f"{{name}} has {a} boxes with {b} apples in each box and {c} bags with {d} apples "
                f"in each bag. How many apples does {{name}} have in total?")
        return text, [f"{a} * {b}", f"{c} * {d}", f"{r1} + {r2}"], r1 + r2
    if template == 1:
        a, b, c = nums
        text = (f"{{name}} buys {a} packs of {b} stickers and then gives away {c} stickers. "
                f"How many stickers does {{name}} have left?")
        return text, [f"{a} * {b}", f"{a * b} - {c}"], a * b - c
    if template == 2:
        a, b, c = nums
        text = (f"A shop sells {a} red pens and {b} blue pens each day. "
                f"How many pens does the shop sell in {c} days?")
        return text, [f"{a} + {b}", f"{a + b} * {c}"], (a + b) * c
    if template == 3:
        a, b, c = nums
        text = (f"{{name}} reads {a} pages every morning and {b} pages every evening. After {c} days, "
                f"how many more pages has {{name}} read in the mornings than in the evenings?")
        return text, [f"{a} - {b}", f"{a - b} * {c}"], (a - b) * c
    if template == 4:
        a, b, c, d, e = nums
        r1, r2 = a * b, c * d
        text = (f"{{name}} has {a} boxes with {b} apples in each box and {c} bags with {d} apples "
                f"in each bag, and then eats {e} apples. How many apples does {{name}} have left?")
        return text, [f"{a} * {b}", f"{c} * {d}", f"{r1} + {r2}", f"{r1 + r2} - {e}"], r1 + r2 - e
    raise ValueError(f"template: unknown value {template}; expected 0..4")


_ARITY = {0: 4, 1: 3, 2: 3, 3: 3, 4: 5}


def _sample(rng: np.random.Generator, split: str) -> tuple[int, tuple[int, ...]]:
    lo, hi = LARGE if split == "ood" else SMALL
    templates = (0, 1, 2, 3, 4) if split == "ood" else (0, 1, 2, 3)
    template = int(rng.choice(templates))
    nums = [int(x) for x in rng.integers(lo, hi + 1, size=_ARITY[template])]
    if template == 1:  # cannot give away more than bought
        nums[2] = min(nums[2], nums[0] * nums[1])
    if template == 3:  # strictly more pages in the mornings
        a, b = sorted(int(x) for x in rng.choice(np.arange(lo, hi + 1), size=2, replace=False))
        nums[0], nums[1] = b, a
    if template == 4:
        nums[4] = min(nums[4], nums[0] * nums[1] + nums[2] * nums[3])
    return template, tuple(nums)


def generate(split: str, num_tasks: int, seed: int = 0) -> list[Task]:
    """Generates `num_tasks` distinct problems of one split, reproducibly.

    Args:
        split: "train", "test" or "ood".
        num_tasks: how many (distinct) tasks.
        seed: generation seed; the same (split, num_tasks, seed) gives the same list.

    Returns:
        list of Task; `answer` is the integer result as a string and
        `metadata["expressions"]` the calculator expressions of the gold solution.

    Raises:
        ValueError: unknown split, or more tasks requested than the split holds.
    """
    check_split(split)
    rng = np.random.default_rng([seed, ("train", "test", "ood").index(split)])
    tasks, seen = [], set()
    for _ in range(50 * num_tasks + 1000):
        if len(tasks) == num_tasks:
            break
        template, nums = _sample(rng, split)
        key = f"{template}:{','.join(map(str, nums))}"
        if key in seen:
            continue
        if split != "ood" and in_distribution_split(key, TEST_FRACTION) != split:
            continue
        seen.add(key)
        text, expressions, answer = _steps(template, nums)
        name = NAMES[int(rng.integers(len(NAMES)))]
        tasks.append(Task(
            task_id=f"arith-{template}-{'-'.join(map(str, nums))}",
            split=split,
            prompt=text.format(name=name) + " Use the calculator for each step.",
            answer=str(answer),
            metadata={"template": template, "operands": nums, "expressions": tuple(expressions)},
        ))
    if len(tasks) < num_tasks:
        raise ValueError(f"num_tasks: split {split!r} yielded only {len(tasks)} distinct tasks, asked {num_tasks}")
    return tasks


def gold_actions(task: Task) -> list[str]:
    """Demonstration: one calculator call per turn, then `<answer>N</answer>`."""
    calls = [format_tool_call("calculator", {"expression": e}) for e in task.metadata["expressions"]]
    return calls + [format_answer(task.answer)]
