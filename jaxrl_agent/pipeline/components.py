"""Builds the main job's components from an ml_collections config.

This is the one place (with train.py / eval.py) that reads a config: it
validates every field it uses at start-up, with errors naming the field, and
hands explicit keyword arguments to the library.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import gymnasium as gym
import jax

import jaxrl_agent.environments as envs
from jaxrl_agent import native
from jaxrl_agent.agent.actor import Actor, EpisodeSpec
from jaxrl_agent.agent.chat import get_chat_template
from jaxrl_agent.data.tokenizers import Tokenizer, load_tokenizer, train_debug_tokenizer
from jaxrl_agent.learner import hparams as hparams_lib
from jaxrl_agent.learner.mesh import data_parallel_size, make_mesh
from jaxrl_agent.models.config import ModelConfig, tiny_config

ENGINES = ("embedded", "sglang")
SPLITS = ("train", "test", "ood")
STALE_POLICIES = ("drop", "tis")
LEARNER_FIELDS = {f.name for f in dataclasses.fields(hparams_lib.LearnerHParams)}


class ConfigError(ValueError):
    """An invalid configuration; the message names the config field."""


def _fail(field: str, message: str) -> None:
    raise ConfigError(f"config.{field}: {message}")


def learner_hparams(config, total_updates: int) -> hparams_lib.LearnerHParams:
    """LearnerHParams from config.learner (unknown keys and bad values name the field)."""
    values = dict(config.learner)
    for key in values:
        if key not in LEARNER_FIELDS:
            _fail(f"learner.{key}", f"unknown field; expected one of {sorted(LEARNER_FIELDS)}")
    values.setdefault("total_steps", total_updates)
    values["temperature"] = float(config.rollout.temperature)
    if str(values.get("is_correction")).lower() in ("none", ""):  # --config.learner.is_correction=none
        values["is_correction"] = None
    try:
        return hparams_lib.LearnerHParams(**values)
    except ValueError as e:
        raise ConfigError(f"config.learner.{e}") from e


def check_advantage_method(hp: hparams_lib.LearnerHParams) -> None:
    """Start-up check that the learner's advantage solver runs here.

    For hp.advantage_method == "native" with an estimator that uses it (gae,
    step_gae, reinforce_pp), builds the CPU kernel now (once, then cached), so
    a missing compiler is reported before the warm-start instead of at the
    first RL update.

    Raises:
      ConfigError: naming learner.advantage_method, the cause and the fix.
    """
    if hp.advantage_method != "native" or hp.estimator not in ("gae", "step_gae", "reinforce_pp"):
        return
    try:
        native.check_platform()
    except ValueError as e:
        _fail("learner.advantage_method", str(e))
    ok, why = native.available()
    if not ok:
        _fail("learner.advantage_method", f"'native' cannot run here ({why}); use 'blocked' (pure JAX)")


def validate(config) -> None:
    """Start-up checks of the fields the library does not check itself."""
    if config.env.id not in gym.registry:
        _fail("env.id", f"{config.env.id!r} is not registered; expected one of {sorted(envs.ENV_IDS)}")
    if config.rollout.engine not in ENGINES:
        _fail("rollout.engine", f"unknown engine {config.rollout.engine!r}; expected one of {list(ENGINES)}")
    if config.rollout.engine == "sglang" and not config.rollout.sglang_urls:
        _fail("rollout.sglang_urls", "engine 'sglang' needs at least one server URL")
    if config.train.stale_policy not in STALE_POLICIES:
        _fail("train.stale_policy", f"expected one of {list(STALE_POLICIES)}, got {config.train.stale_policy!r}")
    for field, value in [("rollout.tasks_per_iter", config.rollout.tasks_per_iter),
                         ("rollout.samples_per_task", config.rollout.samples_per_task),
                         ("train.iterations", config.train.iterations),
                         ("train.checkpoint_every", config.train.checkpoint_every),
                         ("eval.num_tasks", config.eval.num_tasks)]:
        if not isinstance(value, int) or value < 1:
            _fail(field, f"expected an int >= 1, got {value!r}")
    if config.env.kwargs.get("num_tasks") is not None and config.env.num_train_tasks > config.env.kwargs.num_tasks:
        _fail("env.num_train_tasks", f"{config.env.num_train_tasks} exceeds the {config.env.kwargs.num_tasks} tasks "
              f"of the train split (env.kwargs.num_tasks)")
    if config.rollout.tasks_per_iter > config.env.num_train_tasks:
        _fail("rollout.tasks_per_iter", f"{config.rollout.tasks_per_iter} exceeds env.num_train_tasks "
              f"({config.env.num_train_tasks})")
    if config.rollout.max_total_tokens > config.model.max_seq_len:
        _fail("rollout.max_total_tokens", f"{config.rollout.max_total_tokens} exceeds model.max_seq_len "
              f"({config.model.max_seq_len})")
    for split in config.eval.splits:
        if split not in SPLITS:
            _fail("eval.splits", f"unknown split {split!r}; expected some of {list(SPLITS)}")
    for field, value in [("rollout.max_new_tokens", config.rollout.max_new_tokens),
                         ("eval.max_new_tokens", config.eval.max_new_tokens),
                         ("rollout.max_total_tokens", config.rollout.max_total_tokens),
                         ("env.max_turns", config.env.max_turns)]:
        if not isinstance(value, int) or value < 1:
            _fail(field, f"expected an int >= 1, got {value!r}")
    for field, value in [("rollout.temperature", config.rollout.temperature),
                         ("eval.temperature", config.eval.temperature)]:
        if not value > 0:
            _fail(field, f"expected a sampling temperature > 0, got {value!r}")
    ws = config.warmstart
    for field, value, low in [("warmstart.steps", ws.steps, 0), ("warmstart.warmup_steps", ws.warmup_steps, 0),
                              ("warmstart.batch_size", ws.batch_size, 1), ("warmstart.num_demos", ws.num_demos, 1)]:
        if not isinstance(value, int) or value < low:
            _fail(field, f"expected an int >= {low}, got {value!r}")
    if ws.steps > 0 and ws.batch_size > ws.num_demos:
        _fail("warmstart.batch_size", f"{ws.batch_size} exceeds warmstart.num_demos ({ws.num_demos})")
    if ws.steps > 0 and not ws.lr > 0:
        _fail("warmstart.lr", f"expected a learning rate > 0, got {ws.lr!r}")
    if not 0.0 <= ws.guess_fraction < 1.0:
        _fail("warmstart.guess_fraction", f"expected a fraction in [0, 1), got {ws.guess_fraction!r}")
    if not isinstance(config.eval.samples_per_task, int) or config.eval.samples_per_task < 0:
        _fail("eval.samples_per_task", f"expected an int >= 0, got {config.eval.samples_per_task!r}")
    if not config.tokenizer.path and not 300 <= config.tokenizer.vocab_size <= 4096:
        _fail("tokenizer.vocab_size", f"the debug tokenizer needs 300..4096 ids, got {config.tokenizer.vocab_size!r}")
    if not config.model.hf_dir:
        m = config.model
        if m.num_heads % m.num_kv_heads:
            _fail("model.num_heads", f"{m.num_heads} is not a multiple of model.num_kv_heads={m.num_kv_heads}")
    try:
        get_chat_template(config.tokenizer.chat_template)
    except ValueError as e:
        raise ConfigError(f"config.tokenizer.chat_template: {e}") from e


def build_mesh(config) -> jax.sharding.Mesh:
    """The learner mesh; a shape that does not fit the devices names the field."""
    try:
        mesh = make_mesh(tuple(config.mesh.shape))
    except ValueError as e:
        raise ConfigError(f"config.mesh.shape: {e}") from e
    episodes = config.rollout.tasks_per_iter * config.rollout.samples_per_task
    dp = data_parallel_size(mesh)
    if episodes % dp:
        _fail("rollout.tasks_per_iter", f"the batch of tasks_per_iter * samples_per_task = {episodes} episodes "
              f"is not divisible by the data-parallel size {dp} of mesh {tuple(config.mesh.shape)}")
    return mesh


def env_kwargs(config, split: str) -> dict[str, Any]:
    return {"split": split, "max_turns": int(config.env.max_turns), **dict(config.env.kwargs)}


def episode_specs(config, split: str, indices) -> list[EpisodeSpec]:
    """One EpisodeSpec per task index of `split` (the env picks the task by index)."""
    kwargs = env_kwargs(config, split)
    return [EpisodeSpec(config.env.id, options={"task_index": int(i)}, env_kwargs=kwargs) for i in indices]


def split_tasks(config, split: str) -> list:
    """The task objects of a split, as the env sees them."""
    env = gym.make(config.env.id, **env_kwargs(config, split)).unwrapped
    try:
        return list(env.tasks)
    finally:
        env.close()


def build_tokenizer(config, workdir: str) -> Tokenizer:
    """HF tokenizer.json, or the debug BPE tokenizer trained on the env's text.

    The debug tokenizer is a deterministic function of the task text, saved in
    `workdir/tokenizer` so eval.py reads back the same ids.
    """
    if config.tokenizer.path:
        return load_tokenizer(config.tokenizer.path)
    saved = os.path.join(workdir, "tokenizer")
    if os.path.exists(os.path.join(saved, "tokenizer.json")):
        return load_tokenizer(saved)
    env = gym.make(config.env.id, **env_kwargs(config, "train")).unwrapped
    _, info = env.reset(seed=0)
    texts = [info["system_prompt"]] * 16
    for task in list(env.tasks)[:500]:
        texts.append(task.prompt)
        texts.append("\n".join(envs.gold_actions(task)))
    env.close()
    tok = train_debug_tokenizer(texts, vocab_size=int(config.tokenizer.vocab_size),
                                merge_words=bool(config.tokenizer.merge_words))
    tok.save(saved)
    return tok


def model_config(config, tokenizer: Tokenizer) -> ModelConfig:
    """The ModelConfig of the run, without loading weights: config.json of
    config.model.hf_dir, or the tiny model of config.model sized to the tokenizer.

    Raises:
      ConfigError: hf_dir has no config.json, or its vocabulary is smaller
        than the tokenizer's.
    """
    m = config.model
    if m.hf_dir:
        path = os.path.join(m.hf_dir, "config.json")
        if not os.path.isfile(path):
            _fail("model.hf_dir", f"no config.json at {path}")
        with open(path, encoding="utf-8") as f:
            model_cfg = ModelConfig.from_hf_dict(json.load(f), param_dtype="float32", dtype=m.dtype)
        if model_cfg.vocab_size < tokenizer.vocab_size:
            _fail("model.hf_dir", f"vocab_size {model_cfg.vocab_size} < tokenizer vocab {tokenizer.vocab_size}")
        return model_cfg
    return tiny_config(
        vocab_size=tokenizer.vocab_size, hidden_size=m.hidden_size, intermediate_size=m.intermediate_size,
        num_layers=m.num_layers, num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim,
        max_position_embeddings=max(2048, m.max_seq_len), dtype=m.dtype)


def load_model(config, tokenizer: Tokenizer, rng: jax.Array) -> tuple[ModelConfig, Any]:
    """(model config, params): the HF checkpoint of config.model.hf_dir, or a
    random init of the tiny model (see model_config)."""
    model_cfg = model_config(config, tokenizer)
    if config.model.hf_dir:
        from jaxrl_agent.models.hf_io import load_hf_checkpoint

        _, params = load_hf_checkpoint(config.model.hf_dir)
        return model_cfg, params
    from jaxrl_agent.models.transformer import init_params

    return model_cfg, init_params(model_cfg, rng)


def build_engine(config, params, model_cfg: ModelConfig, tokenizer: Tokenizer, *, weight_version: str = "0"):
    """The rollout engine: embedded JAX engine on `params` (labelled
    `weight_version`), or the SGLang HTTP client (params unused: weights reach
    the servers through weight sync)."""
    if config.rollout.engine == "sglang":
        from jaxrl_agent.rollout.sglang_client import SGLangClient

        return SGLangClient(list(config.rollout.sglang_urls))
    from jaxrl_agent.rollout.embedded import EmbeddedEngine

    eos = [tokenizer.eos_id]
    return EmbeddedEngine(params, model_cfg, max_seq_len=int(config.model.max_seq_len),
                          batch_buckets=(16, 64, 128), eos_token_ids=eos, seed=int(config.seed),
                          weight_version=weight_version)


def build_actor(config, engine, tokenizer: Tokenizer, *, temperature: float, max_new_tokens: int,
                episodes: int | None = None) -> Actor:
    """An actor over `engine`; lockstep batching so collects are reproducible.

    `episodes` is the most episodes one collect runs (default: one RL
    iteration's tasks_per_iter * samples_per_task); lockstep needs them all in
    flight at once to be reproducible, so max_in_flight is raised to it.
    """
    if episodes is None:
        episodes = config.rollout.tasks_per_iter * config.rollout.samples_per_task
    return Actor(
        engine, tokenizer, chat_template=config.tokenizer.chat_template,
        max_total_tokens=int(config.rollout.max_total_tokens), max_turns=int(config.env.max_turns),
        max_new_tokens=int(max_new_tokens), temperature=float(temperature),
        max_in_flight=max(int(config.rollout.max_in_flight), int(episodes)),
        max_batch_size=256, env_workers=8, lockstep=not config.train.async_mode,
        seed=int(config.seed))
