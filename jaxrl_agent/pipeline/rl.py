"""One RL iteration (rollout -> batch -> advantages -> update -> weight sync),
synchronous or with rollout overlapping learning, and evaluation.

Everything here takes explicit components (actor, engine, jitted learner
functions); train.py builds them from the config.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Any, Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_agent.agent.batcher import make_batch, power_of_two_buckets
from jaxrl_agent.learner.train_step import make_compute_advantages, make_train_step
from jaxrl_agent.types import Trajectory


def episode_success(traj: Trajectory) -> bool:
    """True when the environment's verifier accepted the final answer."""
    return bool(traj.info.get("env_counters", {}).get("correct", 0) > 0)


def rollout_metrics(trajs: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    """Reward, success and the reward-hacking / budget monitors of a set of episodes."""
    n = max(len(trajs), 1)
    counters = [t.info.get("env_counters", {}) for t in trajs]
    gen_tokens = [int(t.loss_mask.sum()) for t in trajs]
    turns = [t.num_steps for t in trajs]
    tool_calls = [t.info.get("tool_calls", 0) for t in trajs]
    invalid = [t.info.get("invalid_tool_calls", 0) for t in trajs]
    return {
        f"{prefix}/reward_mean": float(np.mean([t.score for t in trajs])) if trajs else 0.0,
        f"{prefix}/success": float(np.mean([episode_success(t) for t in trajs])) if trajs else 0.0,
        f"{prefix}/turns_per_episode": float(np.mean(turns)) if trajs else 0.0,
        f"{prefix}/tokens_per_episode": float(np.mean([t.num_tokens for t in trajs])) if trajs else 0.0,
        f"{prefix}/generated_tokens_per_episode": float(np.mean(gen_tokens)) if trajs else 0.0,
        f"{prefix}/tool_calls_per_episode": float(np.mean(tool_calls)) if trajs else 0.0,
        f"{prefix}/invalid_tool_call_rate": float(sum(invalid) / max(sum(tool_calls) + sum(invalid), 1)),
        f"{prefix}/no_action_rate": float(sum(c.get("no_action", 0) for c in counters) / max(sum(turns), 1)),
        f"{prefix}/answer_without_evidence": float(sum(c.get("answer_without_evidence", 0) > 0
                                                       for c in counters) / n),
        f"{prefix}/context_truncations": float(sum(t.info.get("truncation") == "context" for t in trajs) / n),
        f"{prefix}/truncated": float(np.mean([t.truncated for t in trajs])) if trajs else 0.0,
        f"{prefix}/latency_s": float(np.mean([t.info.get("generate_s", 0.0) + t.info.get("env_s", 0.0)
                                              for t in trajs])) if trajs else 0.0,
    }


def evaluate(actor, specs: Sequence[Any], *, prefix: str, samples_per_task: int = 1) -> dict[str, float]:
    """Runs `samples_per_task` episodes per spec with `actor` and summarizes them."""
    t0 = time.perf_counter()
    trajs = actor.collect(list(specs), num_samples_per_task=samples_per_task)
    out = rollout_metrics(trajs, prefix)
    out[f"{prefix}/wall_s"] = time.perf_counter() - t0
    return out


def eval_modes(config) -> list[tuple[str, float, int]]:
    """(name, temperature, samples per task) of each evaluation protocol.

    "greedy": temperature 0, one episode per task. "sampled": the training
    temperature config.eval.temperature, config.eval.samples_per_task episodes
    per task (mean success = pass@1 under sampling); skipped when that is 0.
    """
    modes = [("greedy", 0.0, 1)]
    if int(config.eval.samples_per_task) > 0:
        modes.append(("sampled", float(config.eval.temperature), int(config.eval.samples_per_task)))
    return modes


def evaluate_policy(config, engine, tokenizer, *, prefix: str = "eval", splits: Sequence[str] | None = None,
                    num_tasks: int | None = None) -> dict[str, float]:
    """Held-out evaluation of the engine's current weights on each split and mode.

    Keys are `{prefix}/{split}/{mode}/{metric}` (see eval_modes, rollout_metrics).
    Tasks are the first min(num_tasks, split size) of each split; sampling is
    seeded from config.seed, so an evaluation is reproducible.
    """
    from jaxrl_agent.pipeline import components as C

    out: dict[str, float] = {}
    splits = tuple(config.eval.splits if splits is None else splits)
    for mode, temperature, samples in eval_modes(config):
        n_max = int(config.eval.num_tasks if num_tasks is None else num_tasks)
        with C.build_actor(config, engine, tokenizer, temperature=temperature,
                           max_new_tokens=config.eval.max_new_tokens, episodes=n_max * samples) as actor:
            actor.seed = int(config.seed) * 7_919 + 17
            for split in splits:
                n = min(n_max, len(C.split_tasks(config, split)))
                specs = C.episode_specs(config, split, range(n))
                out.update(evaluate(actor, specs, prefix=f"{prefix}/{split}/{mode}", samples_per_task=samples))
    return out


@dataclasses.dataclass
class Learner:
    """The jitted learner functions plus batching, for one model and mesh.

    Args:
      model_cfg, hp, mesh: as for make_train_step.
      max_total_tokens: largest token bucket (the episode context budget).
      max_turns: the step bucket S.
      pad_id: token id used on padding.
    """

    model_cfg: Any
    hp: Any
    mesh: Any
    max_total_tokens: int
    max_turns: int
    pad_id: int

    def __post_init__(self):
        self.train_step = make_train_step(self.model_cfg, self.hp, mesh=self.mesh)
        self.compute_advantages = make_compute_advantages(self.model_cfg, self.hp, mesh=self.mesh)
        self.token_buckets = power_of_two_buckets(self.max_total_tokens, min_len=128)
        dp = 1
        for axis in ("data", "fsdp"):
            dp *= self.mesh.shape[axis]
        self.batch_multiple = dp

    def update(self, state, trajs: Sequence[Trajectory], ref_params=None):
        """(state, metrics): one train_step on the episodes (state is donated)."""
        t0 = time.perf_counter()
        batch = make_batch(trajs, token_buckets=self.token_buckets, step_buckets=(self.max_turns,),
                           batch_multiple=self.batch_multiple, pad_id=self.pad_id)
        train_batch = jax.block_until_ready(self.compute_advantages(state, batch, ref_params))
        t1 = time.perf_counter()
        state, metrics = self.train_step(state, train_batch)
        metrics = {f"learner/{k}": float(v) for k, v in jax.device_get(metrics).items()}
        metrics["time/advantages_s"] = t1 - t0  # batching + logprob/value recompute + estimator
        metrics["time/learner_s"] = time.perf_counter() - t1
        metrics["learner/tokens"] = float(np.asarray(batch.segment_ids).astype(bool).sum())
        return state, metrics


def sync_weights(engine, params, model_cfg, version: int, export_dir: str,
                 export_dtype: str | None = None) -> str:
    """Hands the learner's params to the engine under weight_version str(version).

    In-process engines (EmbeddedEngine) take a copy of the params pytree (the
    learner donates its own buffers); HTTP engines (SGLang) get an HF
    safetensors export written atomically under `export_dir`, then
    pause -> update_weights_from_disk -> continue (SGLangClient.update_weights).
    `export_dtype` (e.g. "bfloat16") is the storage dtype of the export.
    Returns "in-process" or the export path.
    """
    from jaxrl_agent.rollout.embedded import EmbeddedEngine

    if isinstance(engine, EmbeddedEngine):
        engine.update_weights(jax.tree.map(jnp.copy, params), str(version))
        return "in-process"
    from jaxrl_agent.rollout.weight_sync import export_for_engine

    path = export_for_engine(params, model_cfg, export_dir, int(version), dtype=export_dtype)
    engine.update_weights(path, str(version))
    return path


def policy_lag(trajs: Sequence[Trajectory], learner_version: int) -> int:
    """Versions between the learner and the oldest turn in `trajs`."""
    oldest = min((int(t.weight_versions.min()) for t in trajs if t.num_steps), default=learner_version)
    return int(learner_version - oldest)


class AsyncRollouts:
    """Rollout of the next batch runs in a thread while the learner trains.

    The producer draws task batches from `next_tasks`, collects them with the
    weights the engine has at that moment, and hands them over through a
    queue of size 1: at most one batch waits, so the policy lag stays bounded
    (the consumer also drops or corrects batches older than its limit).
    """

    def __init__(self, collect: Callable[[Any], list[Trajectory]], next_tasks: Callable[[], Any]):
        self._collect, self._next_tasks = collect, next_tasks
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rollouts", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                trajs = self._collect(self._next_tasks())
                while not self._stop.is_set():
                    try:
                        self._queue.put(("ok", trajs), timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as e:  # noqa: BLE001  (re-raised in the consumer)
            self._queue.put(("error", e))

    def get(self) -> list[Trajectory]:
        kind, value = self._queue.get()
        if kind == "error":
            raise RuntimeError(f"rollout thread failed: {type(value).__name__}: {value}") from value
        return value

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def batches(it: Iterator) -> Callable[[], Any]:
    """A thread-safe next() over a task iterator."""
    lock = threading.Lock()

    def next_batch():
        with lock:
            return next(it)

    return next_batch
