"""Qwen3 on a Cloud TPU v6e / v5e slice: learner and embedded JAX engine on the same chips.

The policy decodes in-process (rollout.engine = "embedded"): sglang-jax has no
/update_weights_from_disk (shared/SGLANG_API.md), so the learner's params are
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

import os

from ml_collections import config_dict

MODEL_DIR = os.path.expanduser("~/models/Qwen3-4B")  # HF directory of the policy on every worker; edit


def get_config() -> config_dict.ConfigDict:
    c = config_dict.ConfigDict()
    c.seed = 0  # one seed for data order, sampling and learner shuffles

    c.env = config_dict.ConfigDict()
    c.env.id = "jaxrl_agent/Calculator-v0"  # a registered jaxrl_agent environment id
    c.env.max_turns = 8  # env-side turn budget (truncation, not termination)
    c.env.kwargs = config_dict.ConfigDict({"num_tasks": 20000})  # extra env constructor kwargs
    c.env.num_train_tasks = 20000  # task indices drawn by the grain iterator (train split)

    c.tokenizer = config_dict.ConfigDict()
    c.tokenizer.path = MODEL_DIR  # HF tokenizer.json (file or dir): the model's own tokenizer
    c.tokenizer.vocab_size = 1024  # debug tokenizer size; unused when tokenizer.path is set
    c.tokenizer.merge_words = True  # debug BPE across word boundaries; unused when tokenizer.path is set
    c.tokenizer.chat_template = "qwen"  # ChatML, as Qwen3 was trained with

    c.model = config_dict.ConfigDict()
    c.model.hf_dir = MODEL_DIR  # load config + weights from this HF directory
    c.model.hidden_size = 2560  # D; unused with hf_dir (read from its config.json)
    c.model.intermediate_size = 9728  # SwiGLU width; unused with hf_dir
    c.model.num_layers = 36  # decoder blocks; unused with hf_dir
    c.model.num_heads = 32  # H; unused with hf_dir
    c.model.num_kv_heads = 8  # K; unused with hf_dir
    c.model.head_dim = 128  # per-head width; unused with hf_dir
    c.model.dtype = "bfloat16"  # compute dtype on the MXU (params and optimizer state stay float32)
    c.model.max_seq_len = 4096  # KV-cache length of the embedded engine (prompt + all turns)

    c.rollout = config_dict.ConfigDict()
    c.rollout.engine = "embedded"  # in-process JAX engine on the learner's sharded params
    c.rollout.sglang_urls = ()  # unused with the embedded engine
    c.rollout.tasks_per_iter = 32  # distinct tasks per RL iteration
    c.rollout.samples_per_task = 8  # G, samples per task (GRPO group size); 256 episodes per iteration
    c.rollout.temperature = 1.0  # sampling temperature during RL
    c.rollout.max_new_tokens = 512  # per-turn generation cap
    c.rollout.max_total_tokens = 4096  # per-episode context budget (truncates)
    c.rollout.max_in_flight = 256  # episodes running at once (decode batches of up to 128)
    c.rollout.export_dir = ""  # unused with the embedded engine (no weight export)
    c.rollout.export_dtype = ""  # storage dtype of weight-sync exports ("" = param dtype; "bfloat16" for bf16 servers)

    c.warmstart = config_dict.ConfigDict()
    c.warmstart.steps = 0  # no SFT warm-start: Qwen3 already follows the tool-call format
    c.warmstart.batch_size = 32  # demonstrations per SFT step (if steps > 0)
    c.warmstart.num_demos = 512  # distinct demonstration episodes recorded (if steps > 0)
    c.warmstart.lr = 1e-5  # peak SFT learning rate (if steps > 0)
    c.warmstart.warmup_steps = 20  # linear warmup, then cosine decay (if steps > 0)

    c.learner = config_dict.ConfigDict()
    c.learner.estimator = "grpo"  # gae | step_gae | grpo | dr_grpo | rloo | reinforce_pp | reinforce_pp_baseline
    c.learner.policy_loss = "ppo"  # ppo | gspo | cispo
    c.learner.clip_low = 0.2  # ratio clip 1 - clip_low
    c.learner.clip_high = 0.28  # ratio clip 1 + clip_high (DAPO clip-higher)
    c.learner.agg_mode = "token-mean"  # loss aggregation
    c.learner.kl_coef = 0.0  # KL to the initial policy (0: no reference copy of the params)
    c.learner.kl_kind = "low_var_kl"  # k1 | k2 | k3 (low_var_kl)
    c.learner.entropy_coef = 0.0  # entropy bonus
    c.learner.lr = 1e-6  # policy learning rate
    c.learner.warmup_steps = 10  # optimizer warmup (updates)
    c.learner.max_grad_norm = 1.0  # global-norm clipping
    c.learner.ppo_epochs = 1  # passes over each batch
    c.learner.num_minibatches = 4  # optimizer updates per iteration (64 episodes each)
    c.learner.num_microbatches = 4  # gradient accumulation: 16 episodes (2 per chip on v6e-8) per pass
    c.learner.gamma = 1.0  # discount (gae / step_gae / reinforce_pp)
    c.learner.lambda_ = 1.0  # GAE lambda
    c.learner.is_correction = "tis"  # None | "tis" | "mis": engine/learner logprob mismatch correction

    c.mesh = config_dict.ConfigDict()
    c.mesh.shape = (1, -1, 1)  # (data, fsdp, tensor): fsdp over every chip of the slice (-1 = all)

    c.train = config_dict.ConfigDict()
    c.train.iterations = 200  # RL iterations (rollout + update + weight sync)
    c.train.async_mode = False  # lockstep rollout: every host runs the same batches (multi-host safe)
    c.train.max_policy_lag = 1  # async: oldest accepted policy version lag
    c.train.stale_policy = "drop"  # async: "drop" stale batches or "tis" (keep, TIS-corrected)
    c.train.checkpoint_every = 20  # iterations between checkpoints
    c.train.keep_checkpoints = 2  # newest checkpoints kept
    c.train.log_every = 1  # iterations between metric writes

    c.eval = config_dict.ConfigDict()
    c.eval.num_tasks = 200  # held-out tasks per split (the calculator's test/ood splits hold 200)
    c.eval.splits = ("test", "ood")  # splits evaluated before and after RL
    c.eval.max_new_tokens = 512  # per-turn cap (greedy decoding)
    c.eval.temperature = 1.0  # "sampled" eval mode: the training temperature
    c.eval.samples_per_task = 4  # "sampled" eval: episodes per task (0 = greedy eval only)
    return c
