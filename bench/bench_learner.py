"""Learner throughput, MFU and memory of train_step.

    python bench/bench_learner.py                      # tiny config, CPU
    python bench/bench_learner.py --config qwen0.5b    # ~0.5B Qwen2.5-style, T=4096, bf16 (H200)

FLOPs per trained token (PaLM, Chowdhery et al. 2022, App. B):
    6 * N  +  12 * L * H * d_head * T
N = parameters touched by matmuls (all but the embedding lookup; the tied
output projection counts once), L layers, H query heads, T sequence length;
forward + backward, causal masking not discounted. One train_step trains
B * T * ppo_epochs tokens. MFU = achieved FLOP/s / peak; the peak is both the
measured bf16 (or f32 on CPU) matmul ceiling of a large jnp.dot in the same
run and, if --peak_tflops is given, the vendor number (H200 dense bf16: 989).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_agent.learner import mesh as mesh_lib
from jaxrl_agent.learner import train_state as ts
from jaxrl_agent.learner import train_step as tsl
from jaxrl_agent.learner.hparams import LearnerHParams
from jaxrl_agent.models.config import ModelConfig, tiny_config
from jaxrl_agent.types import Batch

CONFIGS = {
    "tiny": dict(model=lambda: tiny_config(dtype="float32"), batch=8, seq=128, dot=1024),
    "qwen0.5b": dict(
        model=lambda: ModelConfig(
            vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
            num_heads=14, num_kv_heads=2, head_dim=64, rope_theta=1e6, tie_word_embeddings=True,
            attention_bias=True, family="qwen2", dtype="bfloat16", param_dtype="float32",
        ),
        batch=8, seq=4096, dot=8192,
    ),
}


def matmul_params(cfg: ModelConfig) -> int:
    """N of the 6N rule: parameters of all matmuls (embedding lookup excluded)."""
    d, h, k, dh, f = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
    per_layer = d * (h + 2 * k) * dh + h * dh * d + 3 * d * f
    return cfg.num_layers * per_layer + cfg.vocab_size * d


def flops_per_token(cfg: ModelConfig, seq: int) -> float:
    return 6.0 * matmul_params(cfg) + 12.0 * cfg.num_layers * cfg.num_heads * cfg.head_dim * seq


def matmul_ceiling(n: int, dtype, iters: int = 5) -> float:
    """Measured FLOP/s of an [n, n] x [n, n] jnp.dot."""
    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x: jnp.dot(x, x, preferred_element_type=jnp.float32).astype(dtype))
    f(a).block_until_ready()
    t0 = time.perf_counter()
    for _ in range(iters):
        out = f(a)
    out.block_until_ready()
    return 2.0 * n ** 3 * iters / (time.perf_counter() - t0)


def random_batch(b: int, t: int, vocab: int, seed: int = 0) -> Batch:
    r = np.random.default_rng(seed)
    loss_mask = np.zeros((b, t), bool)
    loss_mask[:, t // 4:] = True  # a quarter prompt, the rest generated
    s = 4
    step_ids = np.where(loss_mask, (np.arange(t)[None] - t // 4) * s // (t - t // 4), -1)
    return Batch(
        tokens=r.integers(1, vocab, (b, t)).astype(np.int32), loss_mask=loss_mask,
        step_ids=step_ids.astype(np.int32),
        rollout_logprobs=np.where(loss_mask, -3.0, 0.0).astype(np.float32),
        positions=np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)).copy(),
        segment_ids=np.ones((b, t), np.int32), step_rewards=r.normal(size=(b, s)).astype(np.float32),
        step_mask=np.ones((b, s), bool), weight_versions=np.zeros((b, s), np.int32),
        terminated=np.ones(b, bool), truncated=np.zeros(b, bool),
        group_ids=(np.arange(b) // 4).astype(np.int32), episode_mask=np.ones(b, bool),
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--microbatches", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mesh", default="-1,1,1", help="data,fsdp,tensor")
    p.add_argument("--peak_tflops", type=float, default=None)
    args = p.parse_args(argv)

    spec = CONFIGS[args.config]
    cfg = spec["model"]()
    b, t = args.batch or spec["batch"], args.seq or spec["seq"]
    mesh = mesh_lib.make_mesh(tuple(int(x) for x in args.mesh.split(",")))
    hp = LearnerHParams(estimator="grpo", lr=1e-6, num_microbatches=args.microbatches,
                        logprob_chunk_size=min(512, t))
    state = ts.init_train_state(cfg, hp, jax.random.key(0), mesh=mesh)
    tb = tsl.make_compute_advantages(cfg, hp, mesh=mesh)(state, random_batch(b, t, cfg.vocab_size))
    step = tsl.make_train_step(cfg, hp, mesh=mesh)

    t0 = time.perf_counter()
    compiled = step.lower(state, tb).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    state, m = compiled(state, tb)  # warm-up (the compiled executable: no second compile)
    jax.block_until_ready(m)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        state, m = compiled(state, tb)
    jax.block_until_ready((state, m))
    step_s = (time.perf_counter() - t0) / args.steps

    tokens = b * t * hp.ppo_epochs
    achieved = tokens * flops_per_token(cfg, t) / step_s
    dot_dtype = jnp.bfloat16 if jax.default_backend() != "cpu" else jnp.float32
    ceiling = matmul_ceiling(spec["dot"], dot_dtype)
    n_dev = mesh.devices.size
    stats = jax.devices()[0].memory_stats() or {}
    out = {
        "config": args.config, "backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
        "devices": n_dev, "mesh": dict(mesh.shape), "jax": jax.__version__, "host": platform.node(),
        "batch": b, "seq": t, "microbatches": args.microbatches,
        "params_matmul": matmul_params(cfg), "flops_per_token": flops_per_token(cfg, t),
        "compile_s": round(compile_s, 2), "step_s": round(step_s, 4),
        "tokens_per_s": round(tokens / step_s, 1),
        "achieved_tflops_per_device": round(achieved / n_dev / 1e12, 4),
        "matmul_ceiling_tflops_per_device": round(ceiling / 1e12, 4),
        "mfu_vs_measured_ceiling": round(achieved / n_dev / ceiling, 4),
        "compiled_temp_bytes": getattr(mem, "temp_size_in_bytes", None),
        "compiled_argument_bytes": getattr(mem, "argument_size_in_bytes", None),
        "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
        "loss": float(m["loss"]),
    }
    if args.peak_tflops:
        out["mfu_vs_peak"] = round(achieved / n_dev / (args.peak_tflops * 1e12), 4)
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
