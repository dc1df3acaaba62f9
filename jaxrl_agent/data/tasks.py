"""Task datasets as grain pipelines with checkpointable iterators.

The training loop draws batches of task instances (dicts produced by the task
sets in `jaxrl_agent.environments`) from a grain `IterDataset`; the iterator's
state (`get_state()` / `set_state()`) is saved with every checkpoint so a
resumed run sees exactly the tasks an uninterrupted one would.
"""

from __future__ import annotations

from typing import Any, Sequence

import grain


def task_iterator(
    tasks: Sequence[Any],
    *,
    batch_size: int,
    seed: int,
    shuffle: bool = True,
    num_epochs: int | None = None,
) -> grain.DatasetIterator:
    """Returns a checkpointable iterator over batches of tasks.

    Args:
      tasks: the task instances (any picklable objects; typically dicts).
      batch_size: tasks per batch (>= 1). The last partial batch of a finite
        run is dropped so every batch has the same size.
      seed: shuffle seed; the order is a pure function of (seed, epoch).
      shuffle: reshuffle each epoch (grain's global shuffle).
      num_epochs: passes over `tasks`; None repeats forever.

    Returns:
      A grain DatasetIterator yielding lists of `batch_size` tasks, with
      `get_state()` / `set_state(state)` for checkpointing.

    Raises:
      ValueError: empty `tasks`, or `batch_size` < 1 or > len(tasks).
    """
    if len(tasks) == 0:
        raise ValueError("tasks: expected at least one task, got an empty sequence")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r}")
    if batch_size > len(tasks):
        raise ValueError(
            f"batch_size: {batch_size} exceeds the number of tasks ({len(tasks)})"
        )
    ds = grain.MapDataset.source(list(tasks))
    if shuffle:
        ds = ds.shuffle(seed=seed)
    ds = ds.repeat(num_epochs)
    ds = ds.batch(batch_size, drop_remainder=True, batch_fn=list)
    return iter(ds.to_iter_dataset())
