"""The rollout-engine contract shared by the embedded JAX engine and SGLang.

The actor and the training loop only ever see this protocol, so switching
between the in-process engine (CPU debugging, tests) and SGLang servers
(production) is a configuration change.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence, runtime_checkable

FINISH_REASONS = ("stop", "length", "abort")


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Sampling parameters, named as SGLang's `sampling_params`.

    Attributes:
        max_new_tokens: maximum number of generated tokens (>= 1).
        temperature: softmax temperature; 0 means greedy.
        top_p: nucleus mass in (0, 1]; 1 disables.
        top_k: keep the k most likely tokens; -1 disables (SGLang convention).
        stop_token_ids: generation stops after emitting any of these ids (the
            stop token is included in the output ids and gets a logprob).
        seed: optional per-request seed (embedded engine: reproducible sampling).
    """

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self):
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: expected an int >= 1, got {self.max_new_tokens!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature: expected >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: expected a value in (0, 1], got {self.top_p!r}")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k: expected -1 (off) or an int >= 1, got {self.top_k!r}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    def to_sglang(self) -> dict[str, Any]:
        """The `sampling_params` object of SGLang's POST /generate."""
        return {
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "stop_token_ids": list(self.stop_token_ids),
            "skip_special_tokens": False,
            "no_stop_trim": True,
            **({"sampling_seed": self.seed} if self.seed is not None else {}),
        }


@dataclasses.dataclass
class GenerateOutput:
    """One completion.

    Attributes:
        output_ids: generated token ids, in order (stop token included).
        logprobs: logprob of each generated token under the sampling policy
            (after temperature), same length as output_ids, float.
        finish_reason: "stop" (a stop token), "length" (max_new_tokens or the
            context limit) or "abort" (the server aborted the request).
        weight_version: version of the weights that produced the completion.
        meta: anything else the engine reported (latency, cached tokens ...).
    """

    output_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    weight_version: str
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if len(self.output_ids) != len(self.logprobs):
            raise ValueError(
                f"logprobs: expected one per output id ({len(self.output_ids)}), "
                f"got {len(self.logprobs)}"
            )
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(
                f"finish_reason: expected one of {FINISH_REASONS}, got {self.finish_reason!r}"
            )


@runtime_checkable
class RolloutEngine(Protocol):
    """What the actor needs from a policy server."""

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams
    ) -> list[GenerateOutput]:
        """Completes each prompt (token ids); returns outputs in prompt order."""
        ...

    def update_weights(self, source: Any, weight_version: str) -> None:
        """Loads new weights (params pytree or HF directory) under a new version."""
        ...

    def health(self) -> bool:
        """True when the engine can serve requests."""
        ...

    @property
    def weight_version(self) -> str:
        """Version of the weights currently served."""
        ...
