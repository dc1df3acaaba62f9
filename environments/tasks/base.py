"""Task records and the split rules shared by every task set.

Every task set has three disjoint splits: `train`, `test` (held out, same
distribution) and `ood` (out of distribution: larger numbers, more steps,
other bug kinds or two-hop questions). Train/test membership is decided by a
stable hash (sha256) of the task's canonical key, so it does not depend on
the seed, the Python hash seed or the generation order.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Mapping

SPLITS = ("train", "test", "ood")


@dataclasses.dataclass(frozen=True)
class Task:
    """One task instance.

    Attributes:
        task_id: stable, unique identifier (derived from the task's content).
        split: "train", "test" or "ood".
        prompt: the user's task text (first observation).
        answer: gold answer (a number/string; for code tasks the reference code).
        metadata: task-specific data for the verifier and gold demonstrations
            (e.g. intermediate expressions, unit tests).
    """

    task_id: str
    split: str
    prompt: str
    answer: str
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def check_split(split: str, allowed: tuple[str, ...] = SPLITS) -> str:
    """Returns `split` or raises ValueError listing the valid splits."""
    if split not in allowed:
        raise ValueError(f"split: unknown value {split!r}; expected one of {list(allowed)}")
    return split


def hash_bucket(key: str) -> float:
    """A stable number in [0, 1) from the sha256 of `key`."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def in_distribution_split(key: str, test_fraction: float) -> str:
    """"test" for a `test_fraction` share of keys (by hash), else "train"."""
    return "test" if hash_bucket(key) < test_fraction else "train"
