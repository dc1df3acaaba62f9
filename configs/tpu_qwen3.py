"""Qwen3 on a Cloud TPU v6e / v5e slice: learner and embedded JAX engine on the same chips.

The policy decodes in-process (rollout.engine = "embedded"): sglang-jax has no
/update_weights_from_disk (docs/SGLANG_API.md), so the learner's params are
handed to the engine directly after every iteration, with no export.

Edit MODEL_DIR (a Qwen3 HF directory: config.json, *.safetensors,
tokenizer.json, tokenizer_config.json) and run, from the repository root:

    # 1. a v6e-8 slice: one host, 8 chips of 32 GiB (v5litepod-8: 8 chips of 16 GiB,
    #    use a Qwen3-1.7B there; v6e-16 and larger are multi-host)
    tpu_scripts/create.sh --name rl --zone us-east5-b --accelerator-type v6e-8
    # 2. copy the repository to every worker and install it with jax[tpu]
    tpu_scripts/setup.sh --name rl --zone us-east5-b
    #    and the model (same path on every worker):
    gcloud compute tpus tpu-vm ssh rl --zone=us-east5-b --worker=all --command="mkdir -p ~/models"
    gcloud compute tpus tpu-vm scp --recurse ~/models/Qwen3-4B rl:~/models --zone=us-east5-b --worker=all
    # 3. train on every worker (logs gathered in ./tpu_logs/worker-<i>.log)
    tpu_scripts/launch.sh --name rl --zone us-east5-b \
        --command "python -m jaxrl_agent.train --config=configs/tpu_qwen3.py --workdir ~/runs/qwen3_4b"
    # 4. evaluate the newest checkpoint, then delete the VM
    tpu_scripts/launch.sh --name rl --zone us-east5-b \
        --command "python -m jaxrl_agent.eval --workdir ~/runs/qwen3_4b --splits=test,ood"
    tpu_scripts/delete.sh --name rl --zone us-east5-b

The workdir lives outside the repository copy (setup.sh replaces that copy).
On a multi-host slice every worker runs the same command and
jax.distributed.initialize() finds the coordinator from the TPU metadata;
the workdir must then be a directory every worker shares.
"""

import importlib.util
import os

from ml_collections import config_dict

MODEL_DIR = os.path.expanduser("~/models/Qwen3-4B")  # HF directory of the policy on every worker; edit
_CPU_DEBUG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_debug.py")  # the base config


def get_config() -> config_dict.ConfigDict:
    spec = importlib.util.spec_from_file_location("configs_cpu_debug", _CPU_DEBUG)  # configs/ is not a package
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    c = base.get_config()  # every field as in configs/cpu_debug.py; only what differs is set below
    # Kept from cpu_debug on purpose: rollout.engine = "embedded" (in-process JAX engine on the
    # learner's sharded params, no weight export) and train.async_mode = False (lockstep rollout:
    # every host runs the same batches, multi-host safe).

    c.env.max_turns = 8  # env-side turn budget (truncation, not termination)
    c.env.kwargs.num_tasks = 20000  # extra env constructor kwargs
    c.env.num_train_tasks = 20000  # task indices drawn by the grain iterator (train split)

    c.tokenizer.path = MODEL_DIR  # the model's own tokenizer; vocab_size and merge_words go unused

    c.model.hf_dir = MODEL_DIR  # load config + weights from this HF directory (the model.* shape fields go unused)
    c.model.dtype = "bfloat16"  # compute dtype on the MXU (params and optimizer state stay float32)
    c.model.max_seq_len = 4096  # KV-cache length of the embedded engine (prompt + all turns)

    c.rollout.tasks_per_iter = 32  # distinct tasks per RL iteration; x G = 8 samples: 256 episodes
    c.rollout.max_new_tokens = 512  # per-turn generation cap
    c.rollout.max_total_tokens = 4096  # per-episode context budget (truncates)

    c.warmstart.steps = 0  # no SFT warm-start: Qwen3 already follows the tool-call format
    c.warmstart.lr = 1e-5  # peak SFT learning rate (if steps > 0)
    c.warmstart.guess_fraction = 0.0  # gold demonstrations only (if steps > 0)

    c.learner.lr = 1e-6  # policy learning rate; kl_coef stays 0: no reference copy of the params
    c.learner.warmup_steps = 10  # optimizer warmup (updates)
    c.learner.num_minibatches = 4  # optimizer updates per iteration (64 episodes each)
    c.learner.num_microbatches = 4  # gradient accumulation: 16 episodes (2 per chip on v6e-8) per pass

    c.mesh.shape = (1, -1, 1)  # (data, fsdp, tensor): fsdp over every chip of the slice (-1 = all)

    c.train.iterations = 200  # RL iterations (rollout + update + weight sync)
    c.train.checkpoint_every = 20  # iterations between checkpoints

    c.eval.num_tasks = 200  # held-out tasks per split (the calculator's test/ood splits hold 200)
    c.eval.splits = ("test", "ood")  # splits evaluated before and after RL
    c.eval.max_new_tokens = 512  # per-turn cap (greedy decoding)
    return c
