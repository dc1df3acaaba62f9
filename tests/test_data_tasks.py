"""Tests for jaxrl_agent.data.tasks (grain task iterators)."""

import pytest

from jaxrl_agent.data.tasks import task_iterator


def _tasks(n):
    return [{"id": i} for i in range(n)]


def test_batches_have_fixed_size_and_cover_an_epoch():
    it = task_iterator(_tasks(6), batch_size=3, seed=0)
    first_epoch = next(it) + next(it)
    assert sorted(t["id"] for t in first_epoch) == list(range(6))


def test_state_restore_replays_the_same_batches():
    it = task_iterator(_tasks(10), batch_size=4, seed=3)
    next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(3)]
    fresh = task_iterator(_tasks(10), batch_size=4, seed=3)
    fresh.set_state(state)
    assert [next(fresh) for _ in range(3)] == expected


def test_seed_changes_order_and_is_reproducible():
    a = [t["id"] for t in next(task_iterator(_tasks(50), batch_size=50, seed=0))]
    b = [t["id"] for t in next(task_iterator(_tasks(50), batch_size=50, seed=0))]
    c = [t["id"] for t in next(task_iterator(_tasks(50), batch_size=50, seed=1))]
    assert a == b and a != c


def test_finite_epochs_stop():
    it = task_iterator(_tasks(4), batch_size=2, seed=0, num_epochs=1, shuffle=False)
    assert [[t["id"] for t in b] for b in it] == [[0, 1], [2, 3]]


@pytest.mark.parametrize(
    "tasks,batch_size,match",
    [([], 1, "tasks"), (_tasks(3), 0, "batch_size"), (_tasks(3), 4, "batch_size")],
)
def test_bad_input(tasks, batch_size, match):
    with pytest.raises(ValueError, match=match):
        task_iterator(tasks, batch_size=batch_size, seed=0)
