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
   (docs/SGLANG_API.md). With sglang_router in front of the servers, list
   the router's one URL in rollout.sglang_urls instead.

2. Train (same command to resume; Ctrl-C checkpoints):

       XLA_PYTHON_CLIENT_MEM_FRACTION=0.45 python -m jaxrl_agent.train \
           --config=configs/gpu_qwen3_sglang.py --workdir=runs/qwen3_8b

3. Evaluate a checkpoint (greedy, embedded JAX engine):

       XLA_PYTHON_CLIENT_MEM_FRACTION=0.45 python -m jaxrl_agent.eval \
           --workdir=runs/qwen3_8b --splits=test,ood
"""

import importlib.util
import os

from ml_collections import config_dict

MODEL_DIR = "/models/Qwen3-8B"  # HF directory of the policy (weights + tokenizer); edit
NUM_SERVERS = 8  # SGLang servers, one per GPU, on ports 30000..30007
_CPU_DEBUG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_debug.py")  # the base config


def get_config() -> config_dict.ConfigDict:
    spec = importlib.util.spec_from_file_location("configs_cpu_debug", _CPU_DEBUG)  # configs/ is not a package
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    c = base.get_config()  # every field as in configs/cpu_debug.py; only what differs is set below

    c.env.max_turns = 8  # env-side turn budget (truncation, not termination)
    c.env.kwargs.num_tasks = 20000  # extra env constructor kwargs
    c.env.num_train_tasks = 20000  # task indices drawn by the grain iterator (train split)

    c.tokenizer.path = MODEL_DIR  # the model's own tokenizer; vocab_size and merge_words go unused

    c.model.hf_dir = MODEL_DIR  # load config + weights from this HF directory (the model.* shape fields go unused)
    c.model.dtype = "bfloat16"  # compute dtype (params and optimizer state stay float32)
    c.model.max_seq_len = 8192  # context limit (prompt + all turns); the servers' --context-length

    c.rollout.engine = "sglang"  # rollout on the SGLang servers of the docstring
    c.rollout.sglang_urls = tuple(f"http://127.0.0.1:{30000 + i}" for i in range(NUM_SERVERS))  # one per GPU
    c.rollout.tasks_per_iter = 64  # distinct tasks per RL iteration; x G = 8 samples: 512 episodes
    c.rollout.max_new_tokens = 1024  # per-turn generation cap
    c.rollout.max_total_tokens = 8192  # per-episode context budget (truncates)
    c.rollout.max_in_flight = 512  # episodes running at once (spread over the servers)
    c.rollout.export_dtype = "bfloat16"  # weight-sync exports (in export_dir) match the bf16 servers

    c.warmstart.steps = 0  # no SFT warm-start: Qwen3 already follows the tool-call format
    c.warmstart.lr = 1e-5  # peak SFT learning rate (if steps > 0)
    c.warmstart.guess_fraction = 0.0  # gold demonstrations only (if steps > 0)

    c.learner.lr = 1e-6  # policy learning rate; kl_coef stays 0: no reference copy of the 8B params
    c.learner.warmup_steps = 10  # optimizer warmup (updates)
    c.learner.num_minibatches = 4  # optimizer updates per iteration (128 episodes each)
    c.learner.num_microbatches = 8  # gradient accumulation: 16 episodes (2 per GPU) per forward/backward

    c.mesh.shape = (1, 8, 1)  # (data, fsdp, tensor): params and optimizer state sharded over the 8 GPUs

    c.train.iterations = 200  # RL iterations (rollout + update + weight sync)
    c.train.stale_policy = "tis"  # async: "drop" stale batches or "tis" (keep, TIS-corrected)
    c.train.checkpoint_every = 20  # iterations between checkpoints

    c.eval.num_tasks = 200  # held-out tasks per split (the calculator's test/ood splits hold 200)
    c.eval.splits = ("test", "ood")  # splits evaluated before and after RL
    c.eval.max_new_tokens = 1024  # per-turn cap (greedy decoding)
    return c
