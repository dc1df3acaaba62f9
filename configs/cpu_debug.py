"""CPU debug run: a tiny model learns to use a calculator tool, SFT then RL.

Run:  python -m jaxrl_agent.train --config=configs/cpu_debug.py --workdir=runs/cpu_debug
Override any field: --config.learner.lr=1e-4 --config.train.iterations=10
"""

from ml_collections import config_dict


def get_config() -> config_dict.ConfigDict:
    c = config_dict.ConfigDict()
    c.seed = 0  # one seed for params, data order, sampling and learner shuffles

    c.env = config_dict.ConfigDict()
    c.env.id = "jaxrl_agent/Calculator-v0"  # a registered jaxrl_agent environment id
    c.env.max_turns = 5  # env-side turn budget (truncation, not termination)
    c.env.kwargs = config_dict.ConfigDict({"num_tasks": 1000})  # extra env constructor kwargs
    c.env.num_train_tasks = 1000  # task indices drawn by the grain iterator (train split)

    c.tokenizer = config_dict.ConfigDict()
    c.tokenizer.path = ""  # HF tokenizer.json (file or dir); "" builds the debug BPE tokenizer
    c.tokenizer.vocab_size = 1024  # debug tokenizer size (ids incl. 256 bytes + specials)
    c.tokenizer.merge_words = True  # debug BPE merges across words: templated phrases become single ids
    c.tokenizer.chat_template = "qwen"  # "qwen" (ChatML) or "llama3"

    c.model = config_dict.ConfigDict()
    c.model.hf_dir = ""  # load config + weights from an HF directory; "" = tiny random init
    c.model.hidden_size = 128  # D
    c.model.intermediate_size = 384  # SwiGLU width
    c.model.num_layers = 2  # decoder blocks
    c.model.num_heads = 4  # H
    c.model.num_kv_heads = 2  # K
    c.model.head_dim = 32  # per-head width
    c.model.dtype = "float32"  # compute dtype (bf16 is slow on CPU)
    c.model.max_seq_len = 256  # context limit of the engine (prompt + all turns)

    c.rollout = config_dict.ConfigDict()
    c.rollout.engine = "embedded"  # "embedded" (in-process JAX) or "sglang"
    c.rollout.sglang_urls = ()  # server URLs when engine == "sglang"
    c.rollout.tasks_per_iter = 16  # distinct tasks per RL iteration
    c.rollout.samples_per_task = 8  # G, samples per task (GRPO group size)
    c.rollout.temperature = 1.0  # sampling temperature during RL
    c.rollout.max_new_tokens = 24  # per-turn generation cap
    c.rollout.max_total_tokens = 256  # per-episode context budget (truncates)
    c.rollout.max_in_flight = 256  # episodes running at once
    c.rollout.export_dir = ""  # weight-sync directory for sglang ("" = workdir/exports)
    c.rollout.export_dtype = ""  # storage dtype of weight-sync exports ("" = param dtype; "bfloat16" for bf16 servers)

    c.warmstart = config_dict.ConfigDict()
    c.warmstart.steps = 320  # SFT steps on the demonstrations (0 skips the stage)
    c.warmstart.batch_size = 32  # demonstrations per SFT step
    c.warmstart.num_demos = 1000  # demonstration episodes recorded, one per train task (<= the split's size)
    c.warmstart.lr = 3e-3  # peak SFT learning rate
    c.warmstart.warmup_steps = 20  # linear warmup, then cosine decay
    # Fraction of demonstrations in which the demonstrator answers at once, without the
    # calculator, with a wrong guess (an imperfect demonstrator on purpose: RL has to
    # learn that the tool path is the rewarded one; 0 = gold demonstrations only).
    c.warmstart.guess_fraction = 0.6

    c.learner = config_dict.ConfigDict()
    c.learner.estimator = "grpo"  # gae | step_gae | grpo | dr_grpo | rloo | reinforce_pp | reinforce_pp_baseline
    c.learner.policy_loss = "ppo"  # ppo | gspo | cispo
    c.learner.clip_low = 0.2  # ratio clip 1 - clip_low
    c.learner.clip_high = 0.28  # ratio clip 1 + clip_high (DAPO clip-higher)
    c.learner.agg_mode = "token-mean"  # loss aggregation
    c.learner.kl_coef = 0.0  # KL to the warm-start policy (0 disables the reference)
    c.learner.kl_kind = "low_var_kl"  # k1 | k2 | k3 (low_var_kl)
    c.learner.entropy_coef = 0.0  # entropy bonus
    c.learner.lr = 1e-4  # policy learning rate (1e-3 collapses the warm-started policy in one step)
    c.learner.warmup_steps = 0  # optimizer warmup (updates)
    c.learner.max_grad_norm = 1.0  # global-norm clipping
    c.learner.ppo_epochs = 1  # passes over each batch
    c.learner.num_minibatches = 2  # optimizer updates per epoch
    c.learner.gamma = 1.0  # discount (gae / step_gae / reinforce_pp)
    c.learner.lambda_ = 1.0  # GAE lambda
    c.learner.advantage_method = "blocked"  # blocked (pure JAX) | native (C++ CPU kernel) | chunked | ...
    c.learner.is_correction = "tis"  # None | "tis" | "mis": rollout/learner mismatch correction

    c.mesh = config_dict.ConfigDict()
    c.mesh.shape = (1, 1, 1)  # (data, fsdp, tensor); product must equal the device count (-1 = rest)

    c.train = config_dict.ConfigDict()
    c.train.iterations = 20  # RL iterations (rollout + update + weight sync)
    c.train.async_mode = False  # overlap rollout of iteration i+1 with learning on i
    c.train.max_policy_lag = 1  # async: oldest accepted policy version lag
    c.train.stale_policy = "drop"  # async: "drop" stale batches or "tis" (keep, TIS-corrected)
    c.train.checkpoint_every = 10  # iterations between checkpoints
    c.train.keep_checkpoints = 2  # newest checkpoints kept
    c.train.log_every = 1  # iterations between metric writes

    c.eval = config_dict.ConfigDict()
    c.eval.num_tasks = 100  # held-out tasks per split
    c.eval.splits = ("test",)  # splits evaluated before and after RL
    c.eval.max_new_tokens = 24  # per-turn cap (greedy decoding)
    c.eval.temperature = 1.0  # "sampled" eval mode: the training temperature
    c.eval.samples_per_task = 2  # "sampled" eval: episodes per task (0 = greedy eval only)
    return c
