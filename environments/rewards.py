"""Reward values of the tool environments (all configurable via the env's `rewards=` kwarg).

Per step the reward is the sum of:

- outcome (final step only, when the action holds an `<answer>`):
  `correct` (default 1.0) if the verifier accepts the answer, else
  `incorrect` (default 0.0);
- format penalties: `invalid_tool_call` (default -0.1) per parse/validation
  error in the action (malformed JSON, unknown tool, bad arguments,
  unterminated tags, ...); `no_action` (default -0.1) when the action holds
  neither a tool call nor an answer;
- process reward: `used_result` (default 0.0, off) once for each successful
  tool result (<= 64 chars) that reappears in a later action (a later tool
  argument or the answer), i.e. a result the policy actually used;
- `truncated` (default 0.0) added on the last step when max_turns runs out.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """Reward values; see the module docstring for when each one applies."""

    correct: float = 1.0
    incorrect: float = 0.0
    invalid_tool_call: float = -0.1
    no_action: float = -0.1
    used_result: float = 0.0
    truncated: float = 0.0

    @classmethod
    def make(cls, value: "RewardConfig | Mapping[str, Any] | None") -> "RewardConfig":
        """Accepts a RewardConfig, a dict of overrides, or None (defaults).

        Raises:
            ValueError: a dict key that is not a field (listing the valid ones).
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - fields)
        if unknown:
            raise ValueError(f"rewards: unknown keys {unknown}; expected some of {sorted(fields)}")
        return cls(**{k: float(v) for k, v in value.items()})
