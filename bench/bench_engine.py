"""Decode throughput of the embedded engine vs. a no-cache baseline; client overhead.

    python bench/bench_engine.py                       # tiny CPU config
    python bench/bench_engine.py --config qwen0.5b --batch-sizes 1 16 64 --skip-naive

Rows: tokens/s of EmbeddedEngine (KV cache, decode loop in jit) at each batch
size, the same with a host loop over single jitted steps (steps_per_call=1),
and a naive generator that re-runs the full padded sequence every step (no
cache; its loop is also inside jit, so only the cache differs). Then the
SGLangClient round trip against the local server vs. calling the engine
directly (per-request overhead). Results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_agent.models.config import ModelConfig, tiny_config
from jaxrl_agent.models.transformer import compute_logits, forward_hidden, init_params
from jaxrl_agent.rollout.embedded import EmbeddedEngine
from jaxrl_agent.rollout.engine import SamplingParams

CONFIGS = {
    "tiny": lambda: tiny_config(vocab_size=256, dtype="float32"),
    # Qwen2.5-0.5B shapes (random weights: nothing is downloaded).
    "qwen0.5b": lambda: ModelConfig(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
        num_heads=14, num_kv_heads=2, head_dim=64, rope_theta=1e6, rope_scaling=None,
        rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=True, qk_norm=False,
        max_position_embeddings=32768, family="qwen2", dtype="bfloat16",
        param_dtype="bfloat16"),
}


@functools.partial(jax.jit, static_argnames=("config", "new_tokens"))
def naive_generate(params, config, prompt, new_tokens: int):
    """Greedy decoding that recomputes the whole [B, P + N] sequence every step."""
    b, p = prompt.shape
    total = p + new_tokens
    tokens = jnp.zeros((b, total), jnp.int32).at[:, :p].set(prompt)
    positions = jnp.broadcast_to(jnp.arange(total, dtype=jnp.int32), (b, total))

    def step(i, tokens):
        cur = p + i
        segment_ids = (positions < cur).astype(jnp.int32)
        hidden = forward_hidden(params, config, tokens, positions, segment_ids)
        last = jax.lax.dynamic_index_in_dim(hidden, cur - 1, axis=1, keepdims=False)
        nxt = jnp.argmax(compute_logits(params, config, last), axis=-1).astype(jnp.int32)
        return jax.lax.dynamic_update_index_in_dim(tokens, nxt, cur, axis=1)

    return jax.lax.fori_loop(0, new_tokens, step, tokens)


def timed(fn, repeats: int) -> float:
    """Median wall seconds of fn() after one warm-up (compile) call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--naive-batch-sizes", type=int, nargs="*", default=[1, 16])
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--skip-client", action="store_true")
    ap.add_argument("--client-requests", type=int, default=40)
    args = ap.parse_args(argv)

    config = CONFIGS[args.config]()
    params = init_params(config, jax.random.key(0))
    max_seq_len = args.prompt_len + args.new_tokens
    rng = np.random.default_rng(0)
    sampling = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0)
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, devices {jax.devices()}")
    print(f"config {args.config}, prompt {args.prompt_len}, new tokens {args.new_tokens}")
    print("| batch | engine, loop in jit (tok/s) | engine, host loop (tok/s) "
          "| naive, no cache (tok/s) | speed-up |")
    print("|---|---|---|---|---|")
    for b in args.batch_sizes:
        prompts = rng.integers(1, config.vocab_size, (b, args.prompt_len)).tolist()
        row = []
        for spc in (None, 1):
            engine = EmbeddedEngine(params, config, max_seq_len=max_seq_len, batch_buckets=(b,),
                                    prompt_buckets=(args.prompt_len,), steps_per_call=spc)
            sec = timed(lambda: engine.generate(prompts, sampling), args.repeats)
            row.append(b * args.new_tokens / sec)
        naive = float("nan")
        if not args.skip_naive and b in args.naive_batch_sizes:
            arr = jnp.asarray(prompts, jnp.int32)
            sec = timed(lambda: naive_generate(params, config, arr, args.new_tokens)
                        .block_until_ready(), max(1, args.repeats - 2))
            naive = b * args.new_tokens / sec
        print(f"| {b} | {row[0]:.0f} | {row[1]:.0f} | {naive:.0f} | {row[0] / naive:.1f}x |",
              flush=True)

    if not args.skip_client:
        client_overhead(params, config, args.client_requests, args.prompt_len)


def client_overhead(params, config, n: int, prompt_len: int) -> None:
    """Per-request time of SGLangClient -> local server vs. the engine called directly."""
    from jaxrl_agent.rollout.server import ServerThread, create_app
    from jaxrl_agent.rollout.sglang_client import SGLangClient

    engine = EmbeddedEngine(params, config, max_seq_len=prompt_len + 8, batch_buckets=(1, 16),
                            prompt_buckets=(prompt_len,))
    prompt = [list(range(1, prompt_len + 1))]
    s = SamplingParams(max_new_tokens=1, temperature=0.0)
    direct = timed(lambda: [engine.generate(prompt, s) for _ in range(n)], 1) / n
    with ServerThread(create_app(engine)) as srv:
        client = SGLangClient(srv.url, timeout_s=120)
        http = timed(lambda: [client.generate(prompt, s) for _ in range(n)], 1) / n
        many = timed(lambda: client.generate(prompt * 16, s), 3)
    print(f"\nclient overhead, 1 prompt x 1 new token, {n} sequential requests: "
          f"engine {direct * 1e3:.2f} ms, client+server {http * 1e3:.2f} ms, "
          f"overhead {(http - direct) * 1e3:.2f} ms/request")
    print(f"16 concurrent requests through the client (server batches them): "
          f"{many * 1e3:.1f} ms total")


if __name__ == "__main__":
    main()
