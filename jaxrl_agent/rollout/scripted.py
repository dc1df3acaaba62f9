"""A scripted rollout engine: replays given actions with fixed logprobs, instantly.

A real `RolloutEngine` (same contract as the embedded and SGLang engines) for
tests and actor benchmarks: a `policy` maps each prompt (token ids) to the
action to emit, as text or token ids; the engine then applies the sampling
parameters the way a server does (stop at the first stop token, included;
cut at max_new_tokens with finish reason "length") and attaches the given
logprobs.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Sequence

from jaxrl_agent.rollout.engine import GenerateOutput, SamplingParams


@dataclasses.dataclass(frozen=True)
class ScriptedAction:
    """What a scripted policy may return instead of plain text or ids.

    Attributes:
        action: text (encoded with the engine's tokenizer) or token ids.
        finish_reason: forces the finish reason ("abort", "length", "stop");
            None lets the engine decide from the stop ids and max_new_tokens.
    """

    action: str | Sequence[int]
    finish_reason: str | None = None


Policy = Callable[[Sequence[int]], "str | Sequence[int] | ScriptedAction"]


class ScriptedEngine:
    """Replays a scripted policy. Thread-safe; `generate` does no model work.

    Args:
        policy: prompt ids -> action (text, ids, or ScriptedAction).
        tokenizer: encodes text actions (anything with `encode(text) -> ids`);
            required when the policy returns text.
        logprob: logprob of every generated token, or a function
            (token_id, index_in_output) -> float.
        weight_version: initial version string.

    Finish reasons: "stop" when the output ends at a stop token or when the
    scripted action ends (the end of a script counts as a stop); "length" when
    cut at max_new_tokens (unless the cut lands right after a stop token).
    """

    def __init__(
        self,
        policy: Policy,
        *,
        tokenizer: Any = None,
        logprob: float | Callable[[int, int], float] = -0.5,
        weight_version: str = "0",
    ):
        self._policy = policy
        self._tokenizer = tokenizer
        self._logprob = logprob
        self._weight_version = str(weight_version)
        self._lock = threading.Lock()
        self.num_requests = 0  # prompts served
        self.num_calls = 0  # generate calls (batches)
        self.batch_sizes: list[int] = []

    def _ids(self, action: str | Sequence[int]) -> list[int]:
        if isinstance(action, str):
            if self._tokenizer is None:
                raise ValueError("policy returned text but ScriptedEngine has no tokenizer")
            return list(self._tokenizer.encode(action))
        return [int(t) for t in action]

    def _complete(self, prompt: Sequence[int], sampling: SamplingParams, version: str) -> GenerateOutput:
        result = self._policy(prompt)
        forced = None
        if isinstance(result, ScriptedAction):
            forced, result = result.finish_reason, result.action
        ids = self._ids(result)
        finish = "stop"
        stops = set(sampling.stop_token_ids)
        cut = next((i + 1 for i, t in enumerate(ids) if t in stops), len(ids))
        ids = ids[:cut]
        if len(ids) > sampling.max_new_tokens:
            ids = ids[: sampling.max_new_tokens]
            finish = "length"
        if forced is not None:
            finish = forced
        if callable(self._logprob):
            logprobs = [float(self._logprob(t, i)) for i, t in enumerate(ids)]
        else:
            logprobs = [float(self._logprob)] * len(ids)
        return GenerateOutput(output_ids=ids, logprobs=logprobs, finish_reason=finish, weight_version=version)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[GenerateOutput]:
        """Completes each prompt with the scripted action; outputs in prompt order."""
        with self._lock:
            version = self._weight_version
            self.num_calls += 1
            self.num_requests += len(prompts)
            self.batch_sizes.append(len(prompts))
        return [self._complete(p, sampling, version) for p in prompts]

    def update_weights(self, source: Any, weight_version: str) -> None:
        """Only records the new version (a script has no weights)."""
        with self._lock:
            self._weight_version = str(weight_version)

    def health(self) -> bool:
        return True

    @property
    def weight_version(self) -> str:
        return self._weight_version
