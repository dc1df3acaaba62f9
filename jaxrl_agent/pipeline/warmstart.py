"""Supervised warm-start: demonstrations recorded by the actor, then SFT.

Demonstrations are produced by the same actor and chat template the RL stage
uses, driving the real environment with a `ScriptedEngine` that replays each
task's demonstration actions (`demonstration_actions`). They are therefore
token-for-token in the format RL trajectories have (prompt, action ids,
observation ids, loss_mask, step_ids), and supervised fine-tuning is plain
masked maximum likelihood over the action tokens.

The demonstrator can be made imperfect on purpose (`demonstration_actions`
with guess_fraction > 0): on that fraction of the tasks it answers at once,
without the tools, with a wrong guess. A policy that imitates it uses the
tools only part of the time; reinforcement learning against the verifier
then has to discover that the tool path is the one that gets rewarded (the
CPU debug run's setup; see README "The CPU debug run").
"""

from __future__ import annotations

import re
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl_agent import losses
from jaxrl_agent.agent.tool_calls import format_answer
from jaxrl_agent.models.config import ModelConfig
from jaxrl_agent.models.logprobs import token_logprobs
from jaxrl_agent.rollout.scripted import ScriptedEngine
from jaxrl_agent.types import Batch

_TOOL_RESPONSE = "<tool_response>"


def gold_policy(
    task_actions: dict[str, Sequence[str]], tokenizer: Any, end_of_turn: str
) -> Callable[[Sequence[int]], str]:
    """A ScriptedEngine policy replaying each task's demonstration actions turn by turn.

    The task is recognised by its user text inside the prompt and the turn by
    the number of tool responses seen so far; each action ends with
    `end_of_turn` (the chat template's stop token), as a trained model would.

    Args:
      task_actions: task prompt text -> actions (tool calls, then the answer).
      tokenizer: decodes prompt ids.
      end_of_turn: stop token text appended to each action (e.g. "<|im_end|>").

    Raises:
      KeyError: (on call) a prompt that contains none of the known tasks.
    """
    ordered = sorted(task_actions, key=len, reverse=True)

    def policy(prompt_ids: Sequence[int]) -> str:
        text = tokenizer.decode(list(prompt_ids))
        for prompt in ordered:
            if prompt in text:
                actions = task_actions[prompt]
                turn = min(text.count(_TOOL_RESPONSE), len(actions) - 1)
                return actions[turn] + end_of_turn
        raise KeyError("gold_policy: the prompt matches no known task")

    return policy


def guess_actions(task: Any, rng: np.random.Generator) -> list[str]:
    """A shortcut demonstration: `<answer>` at once, no tool call, a wrong number.

    The guess is the integer answer plus a nonzero offset drawn uniformly from
    [-10, 10] \\ {0}, so it is always rejected by the verifier.

    Raises:
      ValueError: the task's answer is not an integer (no guess can be made).
    """
    try:
        answer = int(task.answer)
    except (TypeError, ValueError):
        raise ValueError(f"guess_fraction: task {task.task_id!r} has a non-integer answer {task.answer!r}; "
                         f"guess demonstrations need integer answers (use guess_fraction=0)") from None
    offset = int(rng.choice([k for k in range(-10, 11) if k]))
    return [format_answer(str(answer + offset))]


def demonstration_actions(tasks: Sequence[Any], *, guess_fraction: float = 0.0,
                          seed: int = 0) -> dict[str, list[str]]:
    """Task prompt -> the demonstrator's actions, for a ScriptedEngine.

    round(guess_fraction * len(tasks)) tasks, chosen with a NumPy generator
    seeded by `seed`, get `guess_actions` (answer without tools, wrong); the
    others get the gold actions (one calculator call per step, then the
    answer; `jaxrl_agent.environments.gold_actions`).

    Raises:
      ValueError: guess_fraction outside [0, 1], or a guessed task without an
        integer answer.
    """
    import jaxrl_agent.environments as envs

    if not 0.0 <= guess_fraction <= 1.0:
        raise ValueError(f"guess_fraction: expected a fraction in [0, 1], got {guess_fraction!r}")
    rng = np.random.default_rng([seed, 2])
    n_guess = int(round(guess_fraction * len(tasks)))
    guessed = set(rng.permutation(len(tasks))[:n_guess].tolist())
    return {t.prompt: (guess_actions(t, rng) if i in guessed else envs.gold_actions(t))
            for i, t in enumerate(tasks)}


def demonstration_engine(task_actions, tokenizer, end_of_turn: str) -> ScriptedEngine:
    """A RolloutEngine that plays the demonstrations of `task_actions` (logprob 0 per token)."""
    return ScriptedEngine(
        gold_policy(task_actions, tokenizer, end_of_turn), tokenizer=tokenizer, logprob=0.0,
        weight_version="0",
    )


class SFTState(NamedTuple):
    """Warm-start state: params, optax state, step ([] int32)."""

    params: Any
    opt_state: Any
    step: Any


def make_sft(config: ModelConfig, *, lr: float, warmup_steps: int, total_steps: int,
             max_grad_norm: float = 1.0, weight_decay: float = 0.0, logprob_chunk_size: int = 256):
    """Returns (init, step) for masked maximum likelihood on action tokens.

    init(params) -> SFTState; step(state, batch: Batch) -> (state, metrics),
    jitted; loss = -sum(logprobs * loss_mask) / sum(loss_mask) (token-mean
    negative log-likelihood, nats/token), AdamW with warmup + cosine decay.
    """
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, lr, max(1, warmup_steps), max(total_steps, warmup_steps + 1), end_value=lr * 0.1)
    tx = optax.chain(
        optax.clip_by_global_norm(max_grad_norm),
        optax.adamw(schedule, weight_decay=weight_decay),
    )

    def init(params) -> SFTState:
        return SFTState(params, tx.init(params), jnp.zeros((), jnp.int32))

    def loss_fn(params, batch: Batch):
        logprobs, _ = token_logprobs(
            params, config, batch.tokens, batch.positions, batch.segment_ids,
            chunk_size=logprob_chunk_size, return_entropy=False)
        nll = losses.aggregate_loss(-logprobs, batch.loss_mask, "token-mean")
        return nll

    @jax.jit
    def step(state: SFTState, batch: Batch):
        nll, grads = jax.value_and_grad(loss_fn)(state.params, batch)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {"sft/nll": nll, "sft/grad_norm": optax.tree.norm(grads),
                   "sft/lr": schedule(state.step)}
        return SFTState(params, opt_state, state.step + 1), metrics

    return init, step


def strip_markup(text: str) -> str:
    """Task text as the env shows it (for matching demonstrations to prompts)."""
    return re.sub(r"\s+", " ", text).strip()


def run_warmstart(params, model_cfg: ModelConfig, demos, *, steps: int, batch_size: int, lr: float,
                  warmup_steps: int, seed: int, max_total_tokens: int, max_turns: int, pad_id: int,
                  log: Callable[[int, dict], None] | None = None):
    """SFT of `params` on demonstration trajectories; returns (params, last metrics).

    Minibatches of `batch_size` demonstrations are drawn without replacement
    per epoch with a NumPy generator seeded by `seed` (reproducible).

    Raises:
      ValueError: no demonstrations, or batch_size > len(demos).
    """
    from jaxrl_agent.agent.batcher import make_batch, power_of_two_buckets

    if not demos:
        raise ValueError("demos: expected at least one demonstration trajectory")
    if batch_size > len(demos):
        raise ValueError(f"batch_size: {batch_size} exceeds the {len(demos)} demonstrations")
    init, step = make_sft(model_cfg, lr=lr, warmup_steps=warmup_steps, total_steps=steps)
    state = init(params)
    buckets = power_of_two_buckets(max_total_tokens, min_len=128)
    rng = np.random.default_rng(seed)
    order: list[int] = []
    metrics: dict = {}
    for i in range(steps):
        if len(order) < batch_size:
            order = list(rng.permutation(len(demos)))
        idx, order = order[:batch_size], order[batch_size:]
        batch = make_batch([demos[j] for j in idx], token_buckets=buckets, step_buckets=(max_turns,),
                           pad_id=pad_id)
        state, metrics = step(state, batch)
        if log is not None and (i % 10 == 0 or i == steps - 1):
            log(i, {k: float(v) for k, v in jax.device_get(metrics).items()})
    return state.params, {k: float(v) for k, v in jax.device_get(metrics).items()}
