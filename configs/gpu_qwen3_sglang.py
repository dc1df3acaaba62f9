"""Qwen3 on one 8-GPU node: JAX learner over all 8 GPUs, 8 SGLang servers for rollout.

Edit model.hf_dir (a local HF directory of a Qwen3 model: config.json,
*.safetensors, tokenizer.json, tokenizer_config.json) and the paths below, then:

1. Start one SGLang server per GPU, sharing the GPUs with the learner (SGLang
   takes 40% of each GPU's memory; the learner is told to take 45%):

       for i in $(seq 0 7); do
         CUDA_VISIBLE_DEVICES=$i python -m sglang.launch_server \
             --model-path /models/Qwen3-8B --host 127.0.0.1 --port $((30000 + i)) \
             --skip-tokenizer-init --mem-fraction-static 0.4 --tp 1 \
             --dtype bfloat16 --context-length 8192 > sglang_$i.log 2>&1 &
       done
       # wait until every server answers: curl -s http://127.0.0.1:30000/health

   --skip-tokenizer-init: token ids in, token ids out (no retokenization
   drift). The learner pushes new weights after every iteration as an HF
   safetensors export (rollout.export_dir, a path all servers can read) with
   pause_generation -> update_weights_from_disk -> continue_generation
   (shared/SGLANG_API.md). With sglang_router in front of the servers, list
   the router's one URL in rollout.sglang_urls instead.

2. Train (same command to resume; Ctrl-C checkpoints):

       XLA_PYTHON_CLIENT_MEM_FRACTION=0.45 python -m jaxrl_agent.train \
           --config=configs/gpu_qwen3_sglang.py --workdir=runs/qwen3_8b

3. Evaluate a checkpoint (greedy, embedded JAX engine):

       XLA_PYTHON_CLIENT_MEM_FRACTION=0.45 python -m jaxrl_agent.eval \
           --workdir=runs/qwen3_8b --splits=test,ood
"""

from ml_collections import config_dict

MODEL_DIR = "/models/Qwen3-8B"  # HF directory of the policy (weights + tokenizer); edit
NUM_SERVERS = 8  # SGLang servers, one per GPU, on ports 30000..30007


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
    c.model.hidden_size = 4096  # D; unused with hf_dir (read from its config.json)
    c.model.intermediate_size = 12288  # SwiGLU width; unused with hf_dir
    c.model.num_layers = 36  # decoder blocks; unused with hf_dir
    c.model.num_heads = 32  # H; unused with hf_dir
    c.model.num_kv_heads = 8  # K; unused with hf_dir
    c.model.head_dim = 128  # per-head width; unused with hf_dir
    c.model.dtype = "bfloat16"  # compute dtype (params and optimizer state stay float32)
    c.model.max_seq_len = 8192  # context limit (prompt + all turns); the servers' --context-length

    c.rollout = config_dict.ConfigDict()
    c.rollout.engine = "sglang"  # rollout on the SGLang servers of the docstring
    c.rollout.sglang_urls = tuple(f"http://127.0.0.1:{30000 + i}" for i in range(NUM_SERVERS))  # one per GPU
    c.rollout.tasks_per_iter = 64  # distinct tasks per RL iteration
    c.rollout.samples_per_task = 8  # G, samples per task (GRPO group size); 512 episodes per iteration
    c.rollout.temperature = 1.0  # sampling temperature during RL
    c.rollout.max_new_tokens = 1024  # per-turn generation cap
    c.rollout.max_total_tokens = 8192  # per-episode context budget (truncates)
    c.rollout.max_in_flight = 512  # episodes running at once (spread over the servers)
    c.rollout.export_dir = ""  # weight-sync exports the servers read ("" = workdir/exports)
    c.rollout.export_dtype = "bfloat16"  # storage dtype of weight-sync exports ("" = param dtype; "bfloat16" for bf16 servers)

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
    c.learner.kl_coef = 0.0  # KL to the initial policy (0: no reference copy of the 8B params)
    c.learner.kl_kind = "low_var_kl"  # k1 | k2 | k3 (low_var_kl)
    c.learner.entropy_coef = 0.0  # entropy bonus
    c.learner.lr = 1e-6  # policy learning rate
    c.learner.warmup_steps = 10  # optimizer warmup (updates)
    c.learner.max_grad_norm = 1.0  # global-norm clipping
    c.learner.ppo_epochs = 1  # passes over each batch
    c.learner.num_minibatches = 4  # optimizer updates per iteration (128 episodes each)
    c.learner.num_microbatches = 8  # gradient accumulation: 16 episodes (2 per GPU) per forward/backward
    c.learner.gamma = 1.0  # discount (gae / step_gae / reinforce_pp)
    c.learner.lambda_ = 1.0  # GAE lambda
    c.learner.is_correction = "tis"  # None | "tis" | "mis": SGLang/learner logprob mismatch correction

    c.mesh = config_dict.ConfigDict()
    c.mesh.shape = (1, 8, 1)  # (data, fsdp, tensor): params and optimizer state sharded over the 8 GPUs

    c.train = config_dict.ConfigDict()
    c.train.iterations = 200  # RL iterations (rollout + update + weight sync)
    c.train.async_mode = False  # overlap rollout of iteration i+1 with learning on i
    c.train.max_policy_lag = 1  # async: oldest accepted policy version lag
    c.train.stale_policy = "tis"  # async: "drop" stale batches or "tis" (keep, TIS-corrected)
    c.train.checkpoint_every = 20  # iterations between checkpoints
    c.train.keep_checkpoints = 2  # newest checkpoints kept
    c.train.log_every = 1  # iterations between metric writes

    c.eval = config_dict.ConfigDict()
    c.eval.num_tasks = 200  # held-out tasks per split (the calculator's test/ood splits hold 200)
    c.eval.splits = ("test", "ood")  # splits evaluated before and after RL
    c.eval.max_new_tokens = 1024  # per-turn cap (greedy decoding)
    c.eval.temperature = 1.0  # "sampled" eval mode: the training temperature
    c.eval.samples_per_task = 4  # "sampled" eval: episodes per task (0 = greedy eval only)
    return c
