"""Evaluation of a training run's checkpoint on held-out task splits.

`evaluate_checkpoint(workdir, ...)` is what `python -m jaxrl_agent.eval`
calls. It rebuilds the job's config from `workdir/config.json`, the tokenizer
(`config.tokenizer.path` or `workdir/tokenizer`), the model config and the
learner hyperparameters exactly as `run_training` does, restores the
checkpoint's TrainState onto a mesh, and runs one greedy episode per task of
each split with the embedded engine. The report holds, per split, the
rollout metrics of `pipeline.rl.rollout_metrics` (success, tool calls,
tokens and latency per episode, ...).

Every missing input (workdir, config.json, tokenizer, checkpoint) raises
`EvalInputError` naming the path, so the entry point can print one line.
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import ml_collections

from jaxrl_agent.learner.checkpoint import Checkpointer, CheckpointError, abstract_like
from jaxrl_agent.learner.mesh import make_mesh
from jaxrl_agent.learner.train_state import abstract_state
from jaxrl_agent.models.config import ModelConfig
from jaxrl_agent.pipeline import components as C
from jaxrl_agent.pipeline.rl import eval_modes, evaluate_policy

# Columns of the printed table: (metric key, header, format).
TABLE_COLUMNS = (
    ("num_tasks", "tasks", "{:d}"),
    ("success", "success", "{:.3f}"),
    ("reward_mean", "reward", "{:.3f}"),
    ("tool_calls_per_episode", "tool calls/ep", "{:.2f}"),
    ("tokens_per_episode", "tokens/ep", "{:.1f}"),
    ("generated_tokens_per_episode", "generated/ep", "{:.1f}"),
    ("latency_s", "latency s/ep", "{:.3f}"),
    ("wall_s", "wall s", "{:.1f}"),
)


class EvalInputError(FileNotFoundError):
    """A workdir, config.json, tokenizer or checkpoint is missing; names the path."""


def load_run_config(workdir: str) -> ml_collections.ConfigDict:
    """The config a run saved as `workdir/config.json`, as a ConfigDict.

    Raises:
      EvalInputError: the workdir or its config.json does not exist.
    """
    if not os.path.isdir(workdir):
        raise EvalInputError(f"workdir {workdir} does not exist")
    path = os.path.join(workdir, "config.json")
    if not os.path.isfile(path):
        raise EvalInputError(f"{path} not found: is {workdir} the --workdir of a training run?")
    with open(path, encoding="utf-8") as f:
        return ml_collections.ConfigDict(json.load(f))


def resolve_checkpoint(workdir: str, checkpoint: str | int | None) -> tuple[str, int]:
    """(checkpoint root directory, step) of the checkpoint to evaluate.

    Args:
      workdir: the run's directory (checkpoints live in workdir/checkpoints).
      checkpoint: None or "" (the newest step), a step number, or the path of
        one `checkpoints/<step>` directory (of this or any run).

    Raises:
      EvalInputError: no such directory, no committed checkpoint, or the step
        is not there (the message lists the available steps).
    """
    if checkpoint not in (None, "") and not str(checkpoint).isdigit():
        path = os.path.abspath(str(checkpoint))
        if not os.path.isdir(path):
            raise EvalInputError(f"checkpoint directory {path} does not exist")
        name = os.path.basename(path.rstrip(os.sep))
        if not name.isdigit():
            raise EvalInputError(f"checkpoint {path}: expected a checkpoints/<step> directory "
                                 f"(a directory named by its step number)")
        root, step = os.path.dirname(path), int(name)
    else:
        root = os.path.join(os.path.abspath(workdir), "checkpoints")
        step = None if checkpoint in (None, "") else int(checkpoint)
    if not os.path.isdir(root):
        raise EvalInputError(f"checkpoint directory {root} does not exist")
    with Checkpointer(root, create=False, max_to_keep=None) as ckpt:
        steps = ckpt.all_steps()
    if not steps:
        raise EvalInputError(f"no committed checkpoint found in {root}")
    if step is None:
        step = steps[-1]
    if step not in steps:
        raise EvalInputError(f"checkpoint step {step} not found in {root}; available: {steps}")
    return root, step


def load_tokenizer_of_run(config, workdir: str):
    """The run's tokenizer; never trains a new one (that would change the ids).

    Raises:
      EvalInputError: neither config.tokenizer.path nor workdir/tokenizer holds one.
    """
    path = config.tokenizer.path or os.path.join(workdir, "tokenizer")
    if not os.path.exists(os.path.join(path, "tokenizer.json")) and not os.path.isfile(path):
        raise EvalInputError(f"no tokenizer.json at {path} (the run saves its tokenizer there)")
    return C.build_tokenizer(config, workdir)


def restore_params(config, model_cfg: ModelConfig, ckpt_root: str, step: int,
                   mesh: jax.sharding.Mesh) -> tuple[Any, dict]:
    """(policy params, checkpoint metadata) of checkpoint `step`, laid out on `mesh`.

    The whole TrainState (and reference params when the run used a KL term)
    is restored, as the run saved it; only the policy params are kept.

    Raises:
      EvalInputError: the checkpoint cannot be read (wraps CheckpointError).
    """
    iterations = int(config.train.iterations)
    hp = C.learner_hparams(config, iterations * config.learner.ppo_epochs * config.learner.num_minibatches)
    target = {"state": abstract_state(model_cfg, hp, mesh), "ref": None}
    if hp.use_kl:
        target["ref"] = abstract_like(target["state"].params)
    with Checkpointer(ckpt_root, create=False, max_to_keep=None) as ckpt:
        try:
            restored, meta = ckpt.restore(target, step=step)
        except CheckpointError as e:
            raise EvalInputError(str(e)) from e
    return restored["state"].params, meta


def evaluate_checkpoint(workdir: str, *, checkpoint: str | int | None = None,
                        splits: Sequence[str] | None = None, num_tasks: int | None = None,
                        mesh_shape: Sequence[int] | None = None) -> dict:
    """Greedy evaluation of one checkpoint of the run in `workdir`.

    Args:
      workdir: a training run's --workdir.
      checkpoint: see resolve_checkpoint (None: the newest).
      splits: task splits to evaluate (default config.eval.splits).
      num_tasks: tasks per split (default config.eval.num_tasks); capped at
        the split's size, the report gives the number run.
      mesh_shape: (data, fsdp, tensor) mesh to restore onto (default
        config.mesh.shape); (-1, 1, 1) replicates the params on every device.

    Returns:
      {"workdir", "checkpoint", "step", "iteration", "env_id", "decoding",
       "splits": {split: {"num_tasks", "success", "tool_calls_per_episode",
       "tokens_per_episode", "latency_s", "wall_s", ... (rollout_metrics)}}}

    Raises:
      EvalInputError: a missing workdir, config.json, tokenizer or checkpoint.
      ConfigError: a bad split, num_tasks or mesh shape (names the field).
    """
    config = load_run_config(workdir)
    config.rollout.engine = "embedded"  # eval decodes in-process, whatever served RL
    C.validate(config)
    splits = list(config.eval.splits if splits is None else splits)
    for split in splits:
        if split not in ("train", "test", "ood"):
            raise C.ConfigError(f"splits: unknown split {split!r}; expected 'train', 'test' or 'ood'")
    if num_tasks is not None:
        if int(num_tasks) < 1:
            raise C.ConfigError(f"num_tasks: expected an int >= 1, got {num_tasks!r}")
        config.eval.num_tasks = int(num_tasks)
    ckpt_root, step = resolve_checkpoint(workdir, checkpoint)
    tok = load_tokenizer_of_run(config, workdir)
    model_cfg = C.model_config(config, tok)
    shape = tuple(config.mesh.shape if mesh_shape is None else mesh_shape)
    try:
        mesh = make_mesh(shape)
    except ValueError as e:
        raise C.ConfigError(f"mesh shape: {e}; pass a mesh that fits, e.g. --mesh_shape=-1,1,1") from e
    params, meta = restore_params(config, model_cfg, ckpt_root, step, mesh)
    engine = C.build_engine(config, jax.tree.map(jnp.copy, params), model_cfg, tok)
    del params
    report = {"workdir": os.path.abspath(workdir), "checkpoint": os.path.join(ckpt_root, str(step)),
              "step": step, "iteration": meta.get("iteration"), "env_id": config.env.id,
              "decoding": f"greedy (T=0) and sampled (T={float(config.eval.temperature):g})",
              "max_new_tokens": int(config.eval.max_new_tokens),
              "splits": {}}
    metrics = evaluate_policy(config, engine, tok, prefix="eval", splits=splits)
    for mode, temperature, samples in eval_modes(config):
        for split in splits:
            head = f"eval/{split}/{mode}/"
            row = {k[len(head):]: v for k, v in metrics.items() if k.startswith(head)}
            row["num_tasks"] = min(int(config.eval.num_tasks), len(C.split_tasks(config, split)))
            row["temperature"], row["samples_per_task"] = temperature, samples
            report["splits"][f"{split}/{mode}"] = row
    return report


def format_table(report: dict) -> str:
    """The report's per-split metrics as an aligned text table (one row per split)."""
    header = ["split"] + [h for _, h, _ in TABLE_COLUMNS]
    rows = [[split] + [fmt.format(values[key]) for key, _, fmt in TABLE_COLUMNS]
            for split, values in report["splits"].items()]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    title = f"{report['env_id']}  checkpoint {report['checkpoint']}  ({report['decoding']})"
    return "\n".join([title] + lines)


def write_report(report: dict, path: str) -> str:
    """Writes the report as JSON at `path` (parent directories created); returns the path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    return path
