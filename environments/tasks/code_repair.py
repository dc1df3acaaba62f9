"""Small code-repair tasks: a buggy function plus unit tests; the fix is verified in the sandbox.

The agent may run code with the `python` tool, then submits the whole fixed
function inside `<answer>...</answer>`; the reward is whether the task's
tests pass in the sandbox (`verifiers.run_tests`).

Splits (fixed, disjoint by construction): train and test hold single-token
bugs (wrong operator, off-by-one, wrong constant, wrong comparison); ood holds
bug kinds absent from both (two interacting bugs, wrong data structure,
missing case), assigned by `kind`.
"""

from __future__ import annotations

import textwrap

from jaxrl_agent.agent.tool_calls import format_answer, format_tool_call
from jaxrl_agent.environments.tasks.base import Task, check_split, in_distribution_split

# (name, kind, buggy body, fixed body, tests); bodies share the signature line.
_PROBLEMS = [
    ("add", "operator", "def add(a, b):\n    return a - b\n", "def add(a, b):\n    return a + b\n",
     ["add(2, 3) == 5", "add(-1, 1) == 0", "add(0, 0) == 0"]),
    ("square", "operator", "def square(x):\n    return x * 2\n", "def square(x):\n    return x * x\n",
     ["square(3) == 9", "square(0) == 0", "square(-4) == 16"]),
    ("is_even", "comparison", "def is_even(n):\n    return n % 2 == 1\n", "def is_even(n):\n    return n % 2 == 0\n",
     ["is_even(4) is True", "is_even(7) is False", "is_even(0) is True"]),
    ("total", "off_by_one", "def total(xs):\n    s = 0\n    for i in range(len(xs) - 1):\n        s += xs[i]\n    return s\n",
     "def total(xs):\n    s = 0\n    for i in range(len(xs)):\n        s += xs[i]\n    return s\n",
     ["total([1, 2, 3]) == 6", "total([]) == 0", "total([5]) == 5"]),
    ("last", "off_by_one", "def last(xs):\n    return xs[len(xs)]\n", "def last(xs):\n    return xs[len(xs) - 1]\n",
     ["last([1, 2, 3]) == 3", "last(['a']) == 'a'"]),
    ("maximum", "comparison", "def maximum(xs):\n    best = xs[0]\n    for x in xs:\n        if x < best:\n            best = x\n    return best\n",
     "def maximum(xs):\n    best = xs[0]\n    for x in xs:\n        if x > best:\n            best = x\n    return best\n",
     ["maximum([3, 9, 2]) == 9", "maximum([-5, -2]) == -2", "maximum([7]) == 7"]),
    ("count_vowels", "constant", "def count_vowels(s):\n    return sum(1 for c in s.lower() if c in 'aeio')\n",
     "def count_vowels(s):\n    return sum(1 for c in s.lower() if c in 'aeiou')\n",
     ["count_vowels('hello') == 2", "count_vowels('UMBRELLA') == 3", "count_vowels('xyz') == 0"]),
    ("average", "operator", "def average(xs):\n    return sum(xs) // len(xs)\n", "def average(xs):\n    return sum(xs) / len(xs)\n",
     ["average([1, 2]) == 1.5", "average([4, 4, 4]) == 4"]),
    ("factorial", "constant", "def factorial(n):\n    r = 0\n    for k in range(2, n + 1):\n        r *= k\n    return r\n",
     "def factorial(n):\n    r = 1\n    for k in range(2, n + 1):\n        r *= k\n    return r\n",
     ["factorial(0) == 1", "factorial(5) == 120", "factorial(1) == 1"]),
    ("reverse", "off_by_one", "def reverse(s):\n    return s[::-1][1:]\n", "def reverse(s):\n    return s[::-1]\n",
     ["reverse('abc') == 'cba'", "reverse('') == ''", "reverse('a') == 'a'"]),
    ("clamp", "comparison", "def clamp(x, lo, hi):\n    return max(lo, max(x, hi))\n", "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
     ["clamp(5, 0, 10) == 5", "clamp(-3, 0, 10) == 0", "clamp(12, 0, 10) == 10"]),
    ("fizz", "operator", "def fizz(n):\n    return 'fizz' if n % 3 else str(n)\n", "def fizz(n):\n    return 'fizz' if n % 3 == 0 else str(n)\n",
     ["fizz(3) == 'fizz'", "fizz(4) == '4'", "fizz(9) == 'fizz'"]),
    ("count_positive", "comparison", "def count_positive(xs):\n    return sum(1 for x in xs if x >= 0)\n",
     "def count_positive(xs):\n    return sum(1 for x in xs if x > 0)\n",
     ["count_positive([1, -2, 0, 3]) == 2", "count_positive([]) == 0"]),
    ("power", "operator", "def power(b, e):\n    return b * e\n", "def power(b, e):\n    return b ** e\n",
     ["power(2, 10) == 1024", "power(3, 0) == 1", "power(5, 1) == 5"]),
    # --- ood kinds ---
    ("dedupe", "data_structure", "def dedupe(xs):\n    return list(set(xs))\n",
     "def dedupe(xs):\n    seen, out = set(), []\n    for x in xs:\n        if x not in seen:\n            seen.add(x)\n            out.append(x)\n    return out\n",
     ["dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]", "dedupe([]) == []", "dedupe([9, 8, 7]) == [9, 8, 7]"]),
    ("safe_div", "missing_case", "def safe_div(a, b):\n    return a / b\n",
     "def safe_div(a, b):\n    if b == 0:\n        return None\n    return a / b\n",
     ["safe_div(6, 3) == 2", "safe_div(1, 0) is None"]),
    ("range_sum", "two_bugs", "def range_sum(lo, hi):\n    s = 1\n    for k in range(lo, hi):\n        s += k\n    return s\n",
     "def range_sum(lo, hi):\n    s = 0\n    for k in range(lo, hi + 1):\n        s += k\n    return s\n",
     ["range_sum(1, 3) == 6", "range_sum(5, 5) == 5", "range_sum(2, 1) == 0"]),
    ("word_count", "missing_case", "def word_count(s):\n    return len(s.split(' '))\n",
     "def word_count(s):\n    return len(s.split())\n",
     ["word_count('a b  c') == 3", "word_count('') == 0", "word_count(' hi ') == 1"]),
]
OOD_KINDS = ("data_structure", "missing_case", "two_bugs")
TEST_FRACTION = 0.25


def _prompt(buggy: str, tests: list[str]) -> str:
    shown = "\n".join(f"assert {t}" for t in tests)
    return ("The following Python function has a bug.\n\n```python\n" + buggy + "```\n\n"
            "It must pass these tests:\n\n```python\n" + shown + "\n```\n\n"
            "Reply with the complete fixed function inside <answer></answer>.")


def all_tasks() -> list[Task]:
    """Every code-repair task with its split (train/test by name hash, ood by bug kind)."""
    out = []
    for name, kind, buggy, fixed, tests in _PROBLEMS:
        split = "ood" if kind in OOD_KINDS else in_distribution_split(f"repair:{name}", TEST_FRACTION)
        out.append(Task(task_id=f"repair-{name}", split=split, prompt=_prompt(buggy, tests), answer=fixed,
                        metadata={"entry_point": name, "kind": kind, "buggy": buggy, "tests": tuple(tests)}))
    return out


def generate(split: str) -> list[Task]:
    """The tasks of one split, in a fixed order.

    Raises:
        ValueError: unknown split.
    """
    check_split(split)
    return [t for t in all_tasks() if t.split == split]


def test_program(code: str, task: Task) -> str:
    """The program the verifier runs: the candidate code, then the task's asserts."""
    asserts = "\n".join(f"assert {t}, {('failed: ' + t)!r}" for t in task.metadata["tests"])
    return code.rstrip() + "\n\n" + asserts + "\n"


def gold_actions(task: Task) -> list[str]:
    """Demonstration: run the fixed code with the tests, then submit it."""
    run = format_tool_call("python", {"code": test_program(task.answer, task) + "print('all tests passed')\n"})
    return [run, format_answer("\n" + textwrap.dedent(task.answer))]
