"""The main job: warm-start, RL iterations with checkpoints, evaluation, plot.

`run_training(config, workdir)` is what `python -m jaxrl_agent.train` calls.
Starting it again with the same workdir resumes from the newest checkpoint
(learner state, reference params, data-iterator state, iteration); Ctrl-C
saves a checkpoint before exiting.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import jax
import jax.numpy as jnp
from tqdm import tqdm

from jaxrl_agent.data.tasks import task_iterator
from jaxrl_agent.learner.checkpoint import Checkpointer, CheckpointError, abstract_like
from jaxrl_agent.learner.distributed import is_main_process, maybe_initialize_distributed
from jaxrl_agent.learner.train_state import abstract_state, init_train_state
from jaxrl_agent.pipeline import components as C
from jaxrl_agent.pipeline.metrics import MetricsWriter, plot_learning_curve, read_metrics
from jaxrl_agent.pipeline.rl import (AsyncRollouts, Learner, batches, eval_modes, evaluate_policy, policy_lag,
                                     rollout_metrics, sync_weights)
from jaxrl_agent.pipeline.warmstart import demonstration_actions, demonstration_engine, run_warmstart

PLOT_KEYS = ["rollout/success", "rollout/reward_mean", "rollout/answer_without_evidence", "learner/entropy",
             "learner/clipfrac",
             "eval/test/greedy/success", "eval/test/sampled/success"]


def _copy(tree):
    """A fresh copy for the engine: the learner donates its own buffers."""
    return jax.tree.map(jnp.copy, tree)


def _warmstart(config, params, model_cfg, tok, log, log_line=print):
    """Demonstrations (gold, or a guess on ws.guess_fraction of them) through the real env and actor, then SFT."""
    ws = config.warmstart
    tasks = C.split_tasks(config, "train")
    if int(ws.num_demos) > len(tasks):
        raise C.ConfigError(f"config.warmstart.num_demos: {ws.num_demos} exceeds the {len(tasks)} tasks of the "
                            f"train split (env.kwargs.num_tasks)")
    tasks = tasks[: int(ws.num_demos)]
    actions = demonstration_actions(tasks, guess_fraction=float(ws.guess_fraction), seed=int(config.seed))
    engine = demonstration_engine(actions, tok, C.get_chat_template(config.tokenizer.chat_template).stop_tokens[0])
    actor = C.build_actor(config, engine, tok, temperature=1.0, max_new_tokens=config.rollout.max_new_tokens)
    with actor:
        demos = actor.collect(C.episode_specs(config, "train", range(len(tasks))))
    kept = [d for d in demos if d.terminated]
    if not kept:
        raise C.ConfigError(
            f"config.warmstart: all {len(demos)} demonstrations were cut off before their answer (env.max_turns="
            f"{config.env.max_turns}, rollout.max_total_tokens={config.rollout.max_total_tokens}); raise those limits")
    if len(kept) < int(ws.batch_size):
        raise C.ConfigError(f"config.warmstart.batch_size: {ws.batch_size} exceeds the {len(kept)} demonstrations "
                            f"that reached an answer (of {len(demos)})")
    with_tools = sum(int(d.info.get("tool_calls", 0) > 0) for d in kept)
    log_line(f"warm-start: {ws.steps} SFT steps on {len(kept)} demonstrations ({with_tools} use the tools, "
             f"{len(kept) - with_tools} answer without them; {len(demos) - len(kept)} cut off by the turn/token "
             f"budget and dropped)")
    demos = kept
    return run_warmstart(params, model_cfg, demos, steps=int(ws.steps), batch_size=int(ws.batch_size),
                         lr=float(ws.lr), warmup_steps=int(ws.warmup_steps), seed=int(config.seed),
                         max_total_tokens=int(config.rollout.max_total_tokens),
                         max_turns=int(config.env.max_turns), pad_id=tok.pad_id, log=log)


# Fields a resumed run may change: they do not affect what was trained or how (the advantage
# solver gives the same advantages within rounding, e.g. "blocked" on a machine without a compiler).
RESUMABLE_CHANGES = ("train.iterations", "train.checkpoint_every", "train.keep_checkpoints", "train.log_every",
                     "eval.", "rollout.sglang_urls", "rollout.export_dir", "rollout.max_in_flight",
                     "learner.advantage_method")


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_resume_config(saved_json: str, config) -> None:
    """Raises ConfigError when `config` differs from the run's saved config.json
    in a field outside RESUMABLE_CHANGES, listing each such field as saved -> now."""
    saved = _flat(json.loads(saved_json))
    now = _flat(json.loads(config.to_json_best_effort()))
    changed = [f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(saved) | set(now))
               if saved.get(k) != now.get(k) and not k.startswith(RESUMABLE_CHANGES)]
    if changed:
        raise C.ConfigError(
            "--workdir: this run was started with another config; resuming would mix two runs. Changed fields "
            f"(saved in config.json -> now): {'; '.join(changed)}. Resume with the original flags, or use a new "
            f"--workdir. (Fields a resume may change: {', '.join(RESUMABLE_CHANGES)})")


class _StopRequest:
    """First Ctrl-C (SIGINT) sets `requested`: the RL loop finishes the current
    iteration, checkpoints it and exits 130. A second Ctrl-C raises
    KeyboardInterrupt at once (no checkpoint). Only the main thread can install
    a signal handler; elsewhere this is inert."""

    def __init__(self, say):
        self.requested, self._say, self._old = False, say, None

    def __enter__(self) -> "_StopRequest":
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self._say("\nCtrl-C: checkpointing after this iteration (Ctrl-C again to quit without saving)",
                  flush=True)

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def _print_summary(summary: dict, config, say) -> None:
    """The held-out success lines (before/after RL) of each split and eval mode."""
    for split in config.eval.splits:
        for mode, _, _ in eval_modes(config):
            key = f"eval/{split}/{mode}/success"
            if key in summary["before"] and key in summary["after"]:
                b, a = summary["before"][key], summary["after"][key]
                say(f"held-out {split} success ({mode}): before RL {100 * b:.1f}%  after RL {100 * a:.1f}%  "
                    f"({100 * (a - b):+.1f} points)")


def run_training(config, workdir: str) -> dict:
    """Runs (or resumes) the job in `workdir`; returns the final summary dict."""
    C.validate(config)
    iterations = int(config.train.iterations)
    hp = C.learner_hparams(config, iterations * config.learner.ppo_epochs * config.learner.num_minibatches)
    C.check_advantage_method(hp)
    maybe_initialize_distributed()
    mesh = C.build_mesh(config)
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise C.ConfigError(f"--workdir: {workdir} exists and is not a directory")
    os.makedirs(workdir, exist_ok=True)
    main = is_main_process()
    say = print if main else (lambda *a, **k: None)
    tok = C.build_tokenizer(config, workdir)
    seed = int(config.seed)
    model_cfg, params = C.load_model(config, tok, jax.random.key(seed))
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=int(config.train.keep_checkpoints))
    data_it = task_iterator(list(range(int(config.env.num_train_tasks))),
                            batch_size=int(config.rollout.tasks_per_iter), seed=seed)
    export_dir = config.rollout.export_dir or os.path.join(workdir, "exports")
    export_dtype = config.rollout.export_dtype or None
    latest = ckpt.latest_step()
    summary_path = os.path.join(workdir, "summary.json")
    config_path = os.path.join(workdir, "config.json")
    if latest is not None and os.path.exists(config_path):
        with open(config_path) as f:
            check_resume_config(f.read(), config)
    if latest is not None and latest >= iterations and os.path.exists(summary_path):
        say(f"run already complete (checkpoint {latest} >= train.iterations={iterations}): {summary_path}")
        with open(summary_path) as f:
            summary = json.load(f)
        _print_summary(summary, config, say)
        return summary
    writer = MetricsWriter(os.path.join(workdir, "logs"), enabled=main)

    def start_engine(state):
        """The rollout engine serving `state.params` as weight_version state.step.

        The embedded engine is built on a copy of the params directly; an HTTP
        engine (SGLang) gets them through the weight-sync export.
        """
        version = int(jax.device_get(state.step))
        engine = C.build_engine(config, _copy(state.params), model_cfg, tok, weight_version=str(version))
        if config.rollout.engine != "embedded":
            sync_weights(engine, state.params, model_cfg, version, export_dir, export_dtype)
        return engine

    if latest is None:
        t0 = time.perf_counter()
        if config.warmstart.steps > 0:
            params, _ = _warmstart(config, params, model_cfg, tok, lambda i, m: writer.write(i, m), say)
        state = init_train_state(model_cfg, hp, jax.random.key(seed + 1), mesh=mesh, params=params)
        ref = _copy(state.params) if hp.use_kl else None
        engine = start_engine(state)
        meta = {"iteration": 0, "data_iter": data_it.get_state(), "warmstart_s": time.perf_counter() - t0}
        meta["eval_before"] = evaluate_policy(config, engine, tok)
        writer.write(0, meta["eval_before"])
        meta["metrics_lines"] = writer.lines
        ckpt.save(0, {"state": state, "ref": ref}, metadata=meta, force=True)
    else:
        target = {"state": abstract_state(model_cfg, hp, mesh), "ref": None}
        if hp.use_kl:
            target["ref"] = abstract_like(target["state"].params)
        try:
            restored, meta = ckpt.restore(target, step=latest)
        except CheckpointError as e:
            raise C.ConfigError(
                f"--workdir: checkpoint {latest} in {ckpt.directory} does not fit this config ({e}); resume with "
                f"the flags the run started with (recorded in {config_path}) or use a new --workdir"
            ) from e
        state, ref = restored["state"], restored["ref"]
        data_it.set_state(meta["data_iter"])
        if "metrics_lines" in meta:  # drop rows logged after this checkpoint (a hard stop): no duplicates
            writer.truncate(int(meta["metrics_lines"]))
        engine = start_engine(state)
        say(f"resumed from {ckpt.directory} at iteration {meta['iteration']}")
    if main and (latest is None or not os.path.exists(config_path)):  # the config the run started with
        with open(config_path, "w") as f:
            f.write(config.to_json_best_effort(indent=2))
    say("held-out before RL: " + ", ".join(f"{k}={v:.3f}" for k, v in meta["eval_before"].items()
                                           if k.endswith("success")))
    start = int(meta["iteration"])
    learner = Learner(model_cfg, hp, mesh, int(config.rollout.max_total_tokens), int(config.env.max_turns),
                      tok.pad_id)
    actor = C.build_actor(config, engine, tok, temperature=config.rollout.temperature,
                          max_new_tokens=config.rollout.max_new_tokens)
    G = int(config.rollout.samples_per_task)

    def collect(task_ids, it=None):
        if it is not None:
            actor.seed = seed * 100_003 + it * 1_000
        t0 = time.perf_counter()
        trajs = actor.collect(C.episode_specs(config, "train", task_ids), num_samples_per_task=G)
        return trajs, time.perf_counter() - t0

    rollouts = None
    if config.train.async_mode:
        rollouts = AsyncRollouts(lambda ids: collect(ids), batches(data_it))
    it, dropped = start, 0
    bar = tqdm(range(start, iterations), initial=start, total=iterations, desc="RL", disable=not main)

    def checkpoint(done: int) -> None:
        meta.update(iteration=done, data_iter=data_it.get_state(), metrics_lines=writer.lines)
        ckpt.save(done, {"state": state, "ref": ref}, metadata=meta, force=True)

    # Ctrl-C is acted on between iterations only: inside one, the learner has
    # donated `state` and the engine may hold newer weights than the checkpoint.
    try:
        with _StopRequest(say) as stop:
            for it in bar:
                saved = False
                t_iter = time.perf_counter()
                if rollouts is None:
                    trajs, rollout_s = collect(next(data_it), it)
                else:
                    trajs, rollout_s = rollouts.get()
                version = int(jax.device_get(state.step))  # weight_version the engine serves now
                lag = policy_lag(trajs, version)
                if rollouts is not None and lag > config.train.max_policy_lag and config.train.stale_policy == "drop":
                    dropped += 1
                    writer.write(it, {"async/dropped_batches": dropped, "async/policy_lag": lag})
                else:
                    state, metrics = learner.update(state, trajs, ref)
                    t_sync = time.perf_counter()
                    sync_weights(engine, state.params, model_cfg, version + 1, export_dir, export_dtype)
                    metrics.update(rollout_metrics(trajs, "rollout"))
                    wall = time.perf_counter() - t_iter
                    metrics.update({"time/rollout_s": rollout_s, "time/weight_sync_s": time.perf_counter() - t_sync,
                                    "time/iteration_s": wall, "async/policy_lag": lag,
                                    "throughput/tokens_per_s": metrics["learner/tokens"] / wall})
                    writer.write(it + 1, metrics)
                    bar.set_postfix(success=f"{metrics['rollout/success']:.2f}",
                                    reward=f"{metrics['rollout/reward_mean']:.2f}")
                    if (it + 1) % config.train.checkpoint_every == 0 or it + 1 == iterations:
                        checkpoint(it + 1)
                        saved = True
                if stop.requested:
                    if not saved:
                        checkpoint(it + 1)
                    ckpt.wait()
                    say(f"\ninterrupted: checkpoint saved at iteration {it + 1} in {ckpt.directory}")
                    raise SystemExit(130)
    finally:
        if rollouts is not None:
            rollouts.close()
        bar.close()
    ckpt.wait()
    after = evaluate_policy(config, engine, tok)
    writer.write(iterations, after)
    summary = {"before": meta["eval_before"], "after": after, "iterations": iterations}
    if main:
        with open(os.path.join(workdir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        plot_learning_curve(read_metrics(writer.logdir), PLOT_KEYS, os.path.join(workdir, "learning_curve.png"),
                            title=f"{config.env.id}: RL ({config.learner.estimator}/{config.learner.policy_loss})")
        _print_summary(summary, config, say)
    writer.close()
    ckpt.close()
    actor.close()
    return summary
