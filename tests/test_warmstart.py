"""The warm-start demonstrator: gold demonstrations and the deliberate wrong guesses."""

import numpy as np
import pytest

from jaxrl_agent.agent.tool_calls import format_answer
from jaxrl_agent.environments import gold_actions
from jaxrl_agent.environments.tasks import arithmetic
from jaxrl_agent.environments.tasks.base import Task
from jaxrl_agent.pipeline.warmstart import demonstration_actions, guess_actions

TASKS = arithmetic.generate("train", 40, seed=0)


def _is_guess(actions):
    return len(actions) == 1 and "<tool_call>" not in actions[0]


def test_guess_fraction_splits_the_tasks_reproducibly():
    acts = demonstration_actions(TASKS, guess_fraction=0.6, seed=3)
    guessed = [t for t in TASKS if _is_guess(acts[t.prompt])]
    assert len(guessed) == 24  # round(0.6 * 40)
    for t in TASKS:
        if t not in guessed:
            assert acts[t.prompt] == gold_actions(t)
    assert demonstration_actions(TASKS, guess_fraction=0.6, seed=3) == acts
    other = demonstration_actions(TASKS, guess_fraction=0.6, seed=4)
    assert {p for p, a in other.items() if _is_guess(a)} != {t.prompt for t in guessed}


def test_guesses_are_wrong_integers_answered_without_tools():
    rng = np.random.default_rng(0)
    for t in TASKS:
        [action] = guess_actions(t, rng)
        answer = action.removeprefix("<answer>").removesuffix("</answer>")
        assert action == format_answer(answer)
        assert 1 <= abs(int(answer) - int(t.answer)) <= 10


def test_zero_fraction_is_all_gold():
    acts = demonstration_actions(TASKS, guess_fraction=0.0)
    assert acts == {t.prompt: gold_actions(t) for t in TASKS}


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_bad_fraction(fraction):
    with pytest.raises(ValueError, match=r"guess_fraction: expected a fraction in \[0, 1\]"):
        demonstration_actions(TASKS, guess_fraction=fraction)


def test_non_integer_answer_cannot_be_guessed():
    task = Task(task_id="search-0", split="train", prompt="Who?", answer="Ada Lovelace", metadata={})
    with pytest.raises(ValueError, match="non-integer answer 'Ada Lovelace'"):
        guess_actions(task, np.random.default_rng(0))
