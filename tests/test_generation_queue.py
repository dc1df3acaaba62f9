"""GenerationQueue lockstep mode: runs are reproducible whatever the thread
timing, and it finishes with fewer batch slots than episodes."""

import random
import threading
import time

import gymnasium as gym
import pytest

import jaxrl_agent.environments  # noqa: F401  (registers jaxrl_agent/Calculator-v0)
from jaxrl_agent.agent.actor import Actor, EpisodeSpec
from jaxrl_agent.data.tokenizers import train_debug_tokenizer
from jaxrl_agent.rollout.engine import GenerateOutput, SamplingParams

CALC = "jaxrl_agent/Calculator-v0"
ENV_KW = {"split": "train", "num_tasks": 16}


@pytest.fixture(scope="module")
def tok():
    return train_debug_tokenizer()


class BatchDependentEngine:
    """A RolloutEngine whose outputs depend on the call's seed and each row's
    index in the batch (as batched sampling on a real engine): a tool call
    "x * y" or, for some rows, a final answer that ends the episode."""

    def __init__(self, tok):
        self.tok = tok
        self.end = tok.encode("<|im_end|>")
        self.batches: list[tuple[int | None, int]] = []
        self._lock = threading.Lock()

    def generate(self, prompts, sampling: SamplingParams):
        time.sleep(random.uniform(0, 0.002))
        with self._lock:
            self.batches.append((sampling.seed, len(prompts)))
        outs = []
        for row, prompt in enumerate(prompts):
            h = ((sampling.seed or 0) * 7919 + row * 104729 + len(prompt)) % 1000
            if h % 3 == 0:
                text = f"<answer>{h}</answer>"
            else:
                text = ('<tool_call>{"name": "calculator", "arguments": {"expression": "'
                        f'{h % 17} * {h % 13}"}}}}</tool_call>')
            ids = (self.tok.encode(text) + self.end)[: sampling.max_new_tokens]
            logprobs = [-(h + i) / 1000 for i in range(len(ids))]
            outs.append(GenerateOutput(ids, logprobs, "stop", "0"))
        return outs

    def update_weights(self, source, weight_version):
        raise NotImplementedError("not needed by these tests")

    def health(self):
        return True

    @property
    def weight_version(self):
        return "0"


class Jittery(gym.Wrapper):
    """env.reset/step sleep a random short time, scrambling thread timing."""

    def reset(self, **kw):
        time.sleep(random.uniform(0, 0.004))
        return self.env.reset(**kw)

    def step(self, action):
        time.sleep(random.uniform(0, 0.004))
        return self.env.step(action)


def _specs(n):
    return [EpisodeSpec(lambda: Jittery(gym.make(CALC, **ENV_KW)), options={"task_index": i % 16})
            for i in range(n)]


def _collect(tok, lockstep, *, n=6, samples=2, max_batch_size=64):
    engine = BatchDependentEngine(tok)
    with Actor(engine, tok, max_total_tokens=4096, max_turns=4, max_new_tokens=128, seed=11,
               lockstep=lockstep, max_batch_size=max_batch_size, env_workers=8) as actor:
        trajs = actor.collect(_specs(n), num_samples_per_task=samples)
    key = [(t.group_id, t.info["sample_index"], t.tokens.tolist(), t.rollout_logprobs.tolist(),
            t.step_rewards.tolist(), t.terminated, t.truncated) for t in trajs]
    return key, engine.batches


def test_lockstep_is_reproducible_under_random_timing(tok):
    runs = [_collect(tok, lockstep=True) for _ in range(3)]
    first_trajs, first_batches = runs[0]
    lengths = {len(steps) for *_, steps, _, _ in first_trajs}
    assert len(lengths) > 1, "episodes should end at different turns (exercises unregister)"
    for trajs, batches in runs[1:]:
        assert batches == first_batches  # same calls, same seeds, same batch sizes
        assert trajs == first_trajs
    assert max(size for _, size in first_batches) == 12  # every episode's turn 0 in one batch


def test_without_lockstep_runs_still_complete(tok):
    # Without lockstep the batches follow thread timing and may differ run to
    # run; only the contract (all episodes, in task/sample order) is fixed.
    trajs, batches = _collect(tok, lockstep=False)
    assert [(g, s) for g, s, *_ in trajs] == [(g, s) for g in range(6) for s in range(2)]
    assert sum(size for _, size in batches) == sum(len(steps) for *_, steps, _, _ in trajs)


def test_lockstep_with_small_batches_finishes_and_is_reproducible(tok):
    t0 = time.perf_counter()
    first, first_batches = _collect(tok, lockstep=True, n=5, samples=2, max_batch_size=3)
    again, batches = _collect(tok, lockstep=True, n=5, samples=2, max_batch_size=3)
    assert time.perf_counter() - t0 < 60
    assert len(first) == 10 and max(size for _, size in first_batches) <= 3
    # Rows go oldest turn first: batches stay full while >= 3 episodes wait, so the
    # 25 requests of this (deterministic) run take ceil(25 / 3) = 9 calls; sorting
    # by episode alone served the first episodes to the end, then the rest one by
    # one (11 calls: [3] * 7 + [1] * 4).
    requests = sum(len(steps) for *_, steps, _, _ in first)
    assert requests == 25 and len(first_batches) == 9
    assert again == first and batches == first_batches
