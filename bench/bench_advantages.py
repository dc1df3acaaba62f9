"""Throughput of token-level `gae` and turn-level `step_gae` (not a test).

Compares, in one run and on the same arrays:
  - every jax method of `jaxrl_agent.scans.METHODS`: "serial" (lax.scan),
    "associative" (log-depth lax.associative_scan), "chunked" (two-level scan)
    "blocked" (closed form per block of positions, matmuls, no transpose)
    and, on CPU, "native" (one C++ pass per row, an XLA FFI custom call,
    jaxrl_agent.native; it replaced the plain C loop that earlier runs of this
    benchmark timed as a reference point, bench/gae_loop.c until 2026-11-30);
  - a per-timestep Python loop over torch tensors, like verl's
    `compute_gae_advantage_return` (with its response_mask pass-through), and the
    same loop over NumPy arrays;
  - the memory-copy floor: a jitted elementwise op that reads every input once
    and writes both outputs once (same bytes as gae's unavoidable traffic);

The copy floor and the jax methods are timed in --rounds
interleaved rounds of --repeats calls each (medians over all rounds), so that
a burst of load on a shared host does not land on one of them only.

step_gae runs at S = T / --tokens-per-step turns and at S = T (the issue's
literal reading: step_gae on as many steps as gae has tokens).

Usage:
  python bench/bench_advantages.py                    # full grid, CPU
  python bench/bench_advantages.py --platform gpu     # on a GPU machine
  python bench/bench_advantages.py --batch 64 --tokens 4096 --repeats 3
  python bench/bench_advantages.py --flush-mib 256     # cold caches (CPU)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--platform", default="cpu", help="JAX platform: cpu, gpu (cuda) or tpu")
    p.add_argument("--batch", type=int, nargs="+", default=[64, 256], help="B values")
    p.add_argument("--tokens", type=int, nargs="+", default=[4096, 32768], help="T values")
    p.add_argument("--tokens-per-step", type=int, default=64, help="step_gae uses S = T / this (and S = T)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per round (jax)")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved rounds: each round times the copy floor and every jax method "
                        "in turn; each is reported as the median of all its rounds' "
                        "calls, so that load on a shared host hits all of them alike")
    p.add_argument("--loop-max-elements", type=int, default=10_000_000,
                   help="Python loops run once (not repeated) above this many B*T elements")
    p.add_argument("--markdown", default="", help="also write the table to this markdown file")
    p.add_argument("--row-tile-elements", type=int, default=0,
                   help="override jaxrl_agent.scans.ROW_TILE_ELEMENTS (the row-tile size of "
                        "method blocked) to tune it on this hardware; 0 keeps the default")
    p.add_argument("--flush-mib", type=int, default=0,
                   help="before every timed jax call (methods and copy floor), write a buffer of this "
                        "many MiB to evict the caches (cold-cache timing; 0: warm, the default)")
    return p.parse_args()


ARGS = parse_args()
os.environ["JAX_PLATFORMS"] = {"gpu": "cuda"}.get(ARGS.platform, ARGS.platform)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from jaxrl_agent import advantages, native, scans  # noqa: E402

if ARGS.row_tile_elements:
    scans.ROW_TILE_ELEMENTS = ARGS.row_tile_elements

GAMMA, LAMBDA = 0.99, 0.95
# "native" is a CPU kernel (jaxrl_agent.native): timed on CPU only.
METHODS = [m for m in advantages.METHODS if m != "native" or jax.default_backend() == "cpu"]


def _loop_gae(rewards, values, maskf, zeros, adv, gamma, lam):
    """verl-style per-timestep loop ([B] vectors per step), masked pass-through.

    Runs unchanged on torch tensors or NumPy arrays: `maskf` is the [B, T] mask
    in the values' dtype, `zeros` a [B] zero vector (never written in place) and
    `adv` a [B, T] zero buffer, filled in place and returned.
    """
    nextvalues = lastgaelam = pending = zeros
    for i in reversed(range(rewards.shape[1])):
        m = maskf[:, i]
        delta = rewards[:, i] + pending + gamma * nextvalues - values[:, i]
        newgae = delta + gamma * lam * lastgaelam
        lastgaelam = m * newgae + (1 - m) * lastgaelam
        nextvalues = m * values[:, i] + (1 - m) * nextvalues
        pending = (1 - m) * (pending + rewards[:, i])
        adv[:, i] = m * newgae
    return adv, (adv + values) * maskf


def torch_loop_gae(rewards, values, mask, gamma, lam):
    """`_loop_gae` over torch tensors, like verl's `compute_gae_advantage_return`."""
    zeros = torch.zeros(rewards.shape[0], dtype=values.dtype)
    return _loop_gae(rewards, values, mask.to(values.dtype), zeros, torch.zeros_like(rewards), gamma, lam)


def numpy_loop_gae(rewards, values, mask, gamma, lam):
    """`_loop_gae` over NumPy arrays."""
    zeros = np.zeros(rewards.shape[0], values.dtype)
    return _loop_gae(rewards, values, mask.astype(values.dtype), zeros, np.zeros_like(rewards), gamma, lam)


@jax.jit
def copy_floor(rewards, values, mask):
    """Reads rewards, values, mask once; writes two [B, T] float32 outputs once."""
    return jnp.where(mask, rewards, 0.0), jnp.where(mask, values, 0.0)


_FLUSH_BUFFER = np.zeros(ARGS.flush_mib * 2**20 // 8)


def flush_caches():
    """Writes and reads --flush-mib MiB, evicting the inputs from the CPU caches (no-op at 0)."""
    if _FLUSH_BUFFER.size:
        np.add(_FLUSH_BUFFER, 1.0, out=_FLUSH_BUFFER)


def time_calls(fn, args, repeats, warm_up=True):
    """Seconds of `repeats` calls of fn(*args), each waited for (jax outputs), after one warm-up
    call unless warm_up=False (the Python loops have nothing to compile)."""
    if warm_up:
        jax.block_until_ready(fn(*args))  # compile + warm up
    times = []
    for _ in range(repeats):
        flush_caches()
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return times


def make_inputs(rng, b, t):
    r = rng.normal(size=(b, t)).astype(np.float32)
    v = rng.normal(size=(b, t)).astype(np.float32)
    m = rng.random((b, t)) < 0.7
    return r, v, m


def bench_case(kind, b, t, rng, rows):
    n = b * t
    r, v, m = make_inputs(rng, b, t)
    dev = [jax.device_put(x) for x in (r, v, m)]
    est = advantages.gae if kind == "gae" else advantages.step_gae
    timed = {"copy floor": (copy_floor, dev)}
    for method in METHODS:
        f = jax.jit(lambda r, v, m, method=method: est(r, v, m, gamma=GAMMA, lambda_=LAMBDA,
                                                         method=method))
        timed[f"jax {method}"] = (f, dev)
    samples = {name: [] for name in timed}
    for _ in range(ARGS.rounds):
        for name, (fn, args) in timed.items():
            samples[name] += time_calls(fn, args, ARGS.repeats)
    floor = float(np.median(samples.pop("copy floor")))
    results = {name: float(np.median(times)) for name, times in samples.items()}
    loop_reps = 1 if n > ARGS.loop_max_elements else 3
    tr, tv, tm = (torch.from_numpy(x) for x in (r, v, m))
    for name, fn, args in [("torch loop", torch_loop_gae, (tr, tv, tm, GAMMA, LAMBDA)),
                           ("numpy loop", numpy_loop_gae, (r, v, m, GAMMA, LAMBDA))]:
        results[name] = float(np.median(time_calls(fn, args, loop_reps, warm_up=False)))
    # Check every timed implementation once against the float32 NumPy loop (advantages).
    ref = numpy_loop_gae(r, v, m, GAMMA, LAMBDA)[0]
    scale = max(float(np.max(np.abs(ref))), 1e-12)
    err = max(float(np.max(np.abs(ref - np.asarray(fn(*args)[0])))) / scale
              for name, (fn, args) in timed.items() if name != "copy floor")
    nbytes = n * (4 + 4 + 1 + 4 + 4)
    for name, sec in results.items():
        rows.append(dict(kind=kind, B=b, T=t, impl=name, sec=sec, rate=n / sec,
                         vs_loop=results["torch loop"] / sec, vs_floor=sec / floor, err=err))
    rows.append(dict(kind=kind, B=b, T=t, impl=f"copy floor ({nbytes / 2**20:.1f} MiB)", sec=floor,
                     rate=n / floor, vs_loop=results["torch loop"] / floor, vs_floor=1.0, err=0.0))


def native_info():
    if "native" not in METHODS:
        return "not timed (CPU only)"
    return f"{native.ensure_registered()} ({native.threads()} OpenMP threads)"


def table(rows):
    head = ("| estimator | B | T or S | implementation | time (ms) | elements/s | "
            "speed-up vs torch loop | time / copy floor |")
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['B']} | {r['T']} | {r['impl']} | {r['sec'] * 1e3:.2f} | "
            f"{r['rate']:.3g} | {r['vs_loop']:.1f}x | {r['vs_floor']:.1f}x |")
    return "\n".join(lines)


def hardware():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next((l.split(":", 1)[1].strip() for l in out.splitlines()
                      if l.startswith("Model name")), platform.processor())
    except OSError:
        model = platform.processor()
    return f"{model}, {os.cpu_count()} cores visible; jax devices: {jax.devices()}"




def main():
    rng = np.random.default_rng(0)
    rows = []
    t_start = time.perf_counter()
    for b in ARGS.batch:
        for t in ARGS.tokens:
            bench_case("gae", b, t, rng, rows)
            print(f"gae B={b} T={t} done ({time.perf_counter() - t_start:.0f} s)", flush=True)
            for s in sorted({max(t // ARGS.tokens_per_step, 1), t}):
                bench_case("step_gae", b, s, rng, rows)
                print(f"step_gae B={b} S={s} done ({time.perf_counter() - t_start:.0f} s)", flush=True)
    text = table(rows)
    meta = (f"date: {datetime.date.today()}; jax {jax.__version__}; torch {torch.__version__}; "
            f"numpy {np.__version__}\nhardware: {hardware()}\n"
            f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}\n"
            f"caches: {f'cold (--flush-mib {ARGS.flush_mib})' if ARGS.flush_mib else 'warm'}; "
            f"{ARGS.rounds} interleaved rounds of {ARGS.repeats} calls; "
            f"blocked row tile: {scans.ROW_TILE_ELEMENTS} elements\n"
            f"native kernel: {native_info()}\n"
            f"total time: {time.perf_counter() - t_start:.0f} s; max relative error vs NumPy loop: "
            f"{max(r['err'] for r in rows):.2g}")
    print(meta)
    print(text)
    if ARGS.markdown:
        with open(ARGS.markdown, "w") as f:
            f.write(f"```\n{meta}\n```\n\n{text}\n")


if __name__ == "__main__":
    main()
