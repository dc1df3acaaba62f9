"""HumanEval: every canonical solution passes its own check, a corrupted one fails (164 + 164 runs)."""

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from jaxrl_agent.environments.tasks import humaneval
from jaxrl_agent.environments.tools import SandboxLimits
from jaxrl_agent.environments.verifiers import run_tests

LIMITS = SandboxLimits(timeout_s=10.0)


def _corrupt(task):
    """Replaces the function body with `return None` (keeps the prompt's signature/docstring)."""
    return task.metadata["prompt"] + "    return None\n"


def _verify(args):
    task, code = args
    passed, result = run_tests(humaneval.test_program(code, task), LIMITS)
    return task.task_id, passed, result.stderr[-300:]


def test_problems_load_offline():
    tasks = humaneval.generate("test")
    assert len(tasks) == 164 and len({t.task_id for t in tasks}) == 164
    assert all(re.search(rf"def {t.metadata['entry_point']}\(", t.answer) for t in tasks)


@pytest.mark.slow
def test_canonical_solutions_pass_and_corrupted_ones_fail():
    tasks = humaneval.generate("test")
    jobs = [(t, t.answer) for t in tasks] + [(t, _corrupt(t)) for t in tasks]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_verify, jobs))
    canonical, corrupted = results[:164], results[164:]
    failed = [(tid, err) for tid, ok, err in canonical if not ok]
    assert not failed, failed[:3]
    wrongly_passed = [tid for tid, ok, _ in corrupted if ok]
    assert not wrongly_passed, wrongly_passed
