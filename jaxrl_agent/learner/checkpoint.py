"""Orbax checkpoints of a TrainState plus JSON metadata.

A thin layer over `orbax.checkpoint.CheckpointManager`:
  - async save every `save_interval_steps`, keep the last `max_to_keep`;
  - each checkpoint holds two items: 'state' (any pytree of jax arrays, e.g.
    a TrainState) and 'metadata' (a JSON dict: data-iterator state, config ...);
  - restore onto any mesh: the caller passes an abstract target whose leaves
    are `jax.ShapeDtypeStruct(shape, dtype, sharding=...)` (see
    `abstract_like`) and orbax reads each shard where it is needed;
  - atomicity: orbax writes into a temporary directory and renames it when
    all writes are committed, so a crash mid-save leaves a tmp directory that
    `latest_step` never lists. Any failure to read a listed checkpoint
    (missing or truncated files) raises `CheckpointError` naming the path.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
    """A checkpoint directory is missing, empty or unreadable; names the path."""


def abstract_like(tree: Any, shardings: Any | None = None) -> Any:
    """ShapeDtypeStructs of `tree` (optionally with new shardings) for restore.

    Args:
      tree: a pytree of arrays or ShapeDtypeStructs (e.g. `jax.eval_shape` of
        the state initializer).
      shardings: same-structure tree of `jax.sharding.Sharding`; None keeps
        each leaf's own sharding (or none).
    """
    if shardings is None:
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
            tree,
        )
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings
    )


class Checkpointer:
    """Saves and restores (state, metadata) under one directory.

    Args:
      directory: checkpoint root; step subdirectories are named by the step.
      save_interval_steps: `save` writes only at multiples of this (unless force).
      max_to_keep: keep the newest K checkpoints (None keeps all).
      async_save: write in a background thread; call `wait()` before reading.
      create: create `directory` if missing; with False a missing directory
        raises CheckpointError.

    Raises:
      CheckpointError: `directory` does not exist and create is False.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        save_interval_steps: int = 1,
        max_to_keep: int | None = 3,
        async_save: bool = True,
        create: bool = True,
    ):
        self.directory = os.path.abspath(os.fspath(directory))
        if not create and not os.path.isdir(self.directory):
            raise CheckpointError(f"checkpoint directory {self.directory} does not exist")
        options = ocp.CheckpointManagerOptions(
            save_interval_steps=save_interval_steps,
            max_to_keep=max_to_keep,
            enable_async_checkpointing=async_save,
            create=create,
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "metadata")
        )

    def save(self, step: int, state: Any, metadata: dict | None = None, *, force: bool = False) -> bool:
        """Starts saving `state` and JSON `metadata` at `step`; True if it saves.

        Returns immediately with async_save; the write is committed atomically.
        """
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            metadata=ocp.args.JsonSave(dict(metadata or {})),
        )
        return bool(self._manager.save(int(step), args=args, force=force))

    def wait(self) -> None:
        """Blocks until pending async saves are committed."""
        self._manager.wait_until_finished()

    def all_steps(self) -> list[int]:
        """Committed checkpoint steps, ascending (tmp dirs of unfinished saves excluded)."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        """The newest committed step, or None."""
        steps = self.all_steps()
        return steps[-1] if steps else None

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict]:
        """Restores (state, metadata) at `step` (default latest) onto the target.

        Args:
          abstract_state: pytree of jax.ShapeDtypeStruct with the target
            shardings (see abstract_like); the mesh may differ from the one
            the checkpoint was saved on.
          step: which checkpoint; None means the latest.

        Raises:
          CheckpointError: no checkpoint in the directory, the step is not
            there, or its files are unreadable (names the path and the cause).
        """
        self.wait()
        steps = self.all_steps()
        if not steps:
            raise CheckpointError(f"no committed checkpoint found in {self.directory}")
        step = steps[-1] if step is None else int(step)
        if step not in steps:
            raise CheckpointError(
                f"checkpoint step {step} not found in {self.directory}; available: {steps}"
            )
        path = os.path.join(self.directory, str(step))
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state),
            metadata=ocp.args.JsonRestore(),
        )
        try:
            restored = self._manager.restore(step, args=args)
        except Exception as e:  # orbax/tensorstore raise many types; wrap them all
            raise CheckpointError(
                f"checkpoint at {path} could not be restored ({type(e).__name__}: {e})"
            ) from e
        return restored["state"], dict(restored["metadata"] or {})

    def close(self) -> None:
        """Waits for pending saves and releases resources."""
        self._manager.wait_until_finished()
        self._manager.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
