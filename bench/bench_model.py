"""Forward + backward throughput and MFU of the policy model.

    python bench/bench_model.py --config tiny --batch 8 --seq 256 --steps 5
    python bench/bench_model.py --config qwen0.5b --batch 8 --seq 2048 --peak_tflops 989

Times `jax.jit(jax.value_and_grad(loss))` with loss = -mean(token_logprobs)
(chunked logits, the learner's path), after one warm-up (compile) step.

FLOPs per trained token (PaLM, Chowdhery et al. 2022, appendix B):
    6 * N  +  12 * L * T * H * head_dim
N counts the matmul parameters (attention, MLP and the output projection;
the embedding lookup is free). The attention term counts QK^T and AV over all
T keys (no causal halving), times 3 for forward + backward.
MFU = tokens/s * FLOPs per token / peak FLOP/s (pass --peak_tflops; e.g.
989 for an H100/H200 bf16 dense).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from jaxrl_agent.models.config import ModelConfig, tiny_config
from jaxrl_agent.models.logprobs import token_logprobs
from jaxrl_agent.models.transformer import init_params

CONFIGS = {
    "tiny": lambda: tiny_config(),
    # Qwen2.5-0.5B shapes (494M parameters, tied embeddings, q/k/v biases).
    "qwen0.5b": lambda: ModelConfig(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
        num_heads=14, num_kv_heads=2, head_dim=64, rope_theta=1e6, tie_word_embeddings=True,
        attention_bias=True, qk_norm=False, family="qwen2"),
}


def flops_per_token(config: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token: 6 N + 12 L T H head_dim (see module docstring)."""
    d, hd = config.hidden_size, config.head_dim
    attn = d * hd * (2 * config.num_heads + 2 * config.num_kv_heads)  # q, k, v, o
    mlp = 3 * d * config.intermediate_size
    n = config.num_layers * (attn + mlp) + d * config.vocab_size
    return 6.0 * n + 12.0 * config.num_layers * seq_len * config.num_heads * hd


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--chunk_size", type=int, default=256)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--peak_tflops", type=float, default=0.0)
    args = parser.parse_args()

    config = CONFIGS[args.config]().replace(dtype=args.dtype)
    params = init_params(config, jax.random.key(0))
    b, t = args.batch, args.seq
    tokens = jax.random.randint(jax.random.key(1), (b, t), 0, config.vocab_size, jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    segment_ids = jnp.ones((b, t), jnp.int32)

    def loss(p):
        logprobs, _ = token_logprobs(p, config, tokens, positions, segment_ids,
                                     chunk_size=args.chunk_size, return_entropy=False)
        return -jnp.mean(logprobs)

    step = jax.jit(jax.value_and_grad(loss))
    start = time.perf_counter()
    jax.block_until_ready(step(params))
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(args.steps):
        out = step(params)
    jax.block_until_ready(out)
    seconds = (time.perf_counter() - start) / args.steps
    tokens_per_s = b * t / seconds
    tflops = tokens_per_s * flops_per_token(config, t) / 1e12
    n_params = sum(x.size for x in jax.tree.leaves(params))
    print(f"device={jax.devices()[0].device_kind} config={args.config} params={n_params / 1e6:.2f}M "
          f"dtype={args.dtype} B={b} T={t} compile_s={compile_s:.1f} step_s={seconds:.4f} "
          f"tokens/s={tokens_per_s:,.0f} TFLOP/s={tflops:.3f}"
          + (f" MFU={tflops / args.peak_tflops:.1%}" if args.peak_tflops else ""))


if __name__ == "__main__":
    main()
