"""Throughput of token-level `gae` and turn-level `step_gae` (not a test).

Compares, in one run and on the same arrays:
  - every jax method of `jaxrl_agent.scans.METHODS`: "serial" (lax.scan),
    "associative" (log-depth lax.associative_scan), "chunked" (two-level scan)
    and "blocked" (closed form per block of positions, matmuls, no transpose);
  - a per-timestep Python loop over torch tensors, like verl's
    `compute_gae_advantage_return` (with its response_mask pass-through), and the
    same loop over NumPy arrays;
  - the memory-copy floor: a jitted elementwise op that reads every input once
    and writes both outputs once (same bytes as gae's unavoidable traffic);
  - a reference point, not a competitor: the same recurrence as a plain C loop
    (bench/gae_loop.c, compiled here with `cc -O3 -march=native -fopenmp`, rows
    over all cores), i.e. what compiled serial code does on this machine.
    Skipped, with the reason printed, when no C compiler is found.

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
import ctypes
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--platform", default="cpu", help="JAX platform: cpu, gpu (cuda) or tpu")
    p.add_argument("--batch", type=int, nargs="+", default=[64, 256], help="B values")
    p.add_argument("--tokens", type=int, nargs="+", default=[4096, 32768], help="T values")
    p.add_argument("--tokens-per-step", type=int, default=64, help="step_gae uses S = T / this (and S = T)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats for jax (median)")
    p.add_argument("--loop-max-elements", type=int, default=10_000_000,
                   help="Python loops run once (not repeated) above this many B*T elements")
    p.add_argument("--markdown", default="", help="also write the table to this markdown file")
    p.add_argument("--row-tile-elements", type=int, default=0,
                   help="override jaxrl_agent.scans.ROW_TILE_ELEMENTS (the row-tile size of "
                        "method blocked) to tune it on this hardware; 0 keeps the default")
    p.add_argument("--no-c-loop", action="store_true", help="skip the compiled C loop reference")
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
from jaxrl_agent import advantages, scans  # noqa: E402

if ARGS.row_tile_elements:
    scans.ROW_TILE_ELEMENTS = ARGS.row_tile_elements

GAMMA, LAMBDA = 0.99, 0.95


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


def time_fn(fn, args, repeats):
    out = fn(*args)
    jax.block_until_ready(out)  # compile + warm up
    times = []
    for _ in range(repeats):
        flush_caches()
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def build_c_loop():
    """Compiles bench/gae_loop.c; returns (ctypes function, command) or (None, why)."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gae_loop.c")
    lib_path = os.path.join(tempfile.mkdtemp(prefix="jaxrl_bench_"), "libgae_loop.so")
    cmd = [os.environ.get("CC", "cc"), "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
           src, "-o", lib_path]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        return None, f"{' '.join(cmd)} failed: {getattr(e, 'stderr', '') or e}".strip()
    fn = ctypes.CDLL(lib_path).gae_rows
    ptr, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    fn.argtypes = [ptr] * 6 + [i64, i64, f32, f32]
    fn.restype = None
    return fn, " ".join(cmd)


def c_loop_gae(fn, rewards, values, mask_u8, init, gamma, lam):
    """(advantages, returns) from the C loop, into fresh arrays as the jax functions return."""
    adv, ret = np.empty_like(rewards), np.empty_like(rewards)
    fn(*(x.ctypes.data for x in (rewards, values, mask_u8, init, adv, ret)),
       rewards.shape[0], rewards.shape[1], gamma, gamma * lam)
    return adv, ret


def time_loop(fn, args, repeats):
    times = []
    for _ in range(repeats):
        flush_caches()
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


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
    floor = time_fn(copy_floor, dev, ARGS.repeats)
    results = {}
    for method in advantages.METHODS:
        f = jax.jit(lambda r, v, m, method=method: est(r, v, m, gamma=GAMMA, lambda_=LAMBDA,
                                                         method=method))
        results[f"jax {method}"] = time_fn(f, dev, ARGS.repeats)
    loop_reps = 1 if n > ARGS.loop_max_elements else 3
    tr, tv, tm = (torch.from_numpy(x) for x in (r, v, m))
    results["torch loop"] = time_loop(torch_loop_gae, (tr, tv, tm, GAMMA, LAMBDA), loop_reps)
    results["numpy loop"] = time_loop(numpy_loop_gae, (r, v, m, GAMMA, LAMBDA), loop_reps)
    # Check agreement once (float32 loops vs jax).
    ref = numpy_loop_gae(r, v, m, GAMMA, LAMBDA)[0]
    got = np.asarray(jax.jit(lambda *a: est(*a, gamma=GAMMA, lambda_=LAMBDA)[0])(*dev))
    err = float(np.max(np.abs(ref - got)) / max(np.max(np.abs(ref)), 1e-12))
    if C_LOOP is not None:
        c_args = (C_LOOP, r, v, m.view(np.uint8), np.zeros(b, np.float32), GAMMA, LAMBDA)
        c_loop_gae(*c_args)  # warm up (OpenMP threads)
        results["c loop (reference)"] = time_loop(c_loop_gae, c_args, ARGS.repeats)
        c_err = np.max(np.abs(ref - c_loop_gae(*c_args)[0])) / max(np.max(np.abs(ref)), 1e-12)
        err = max(err, float(c_err))
    nbytes = n * (4 + 4 + 1 + 4 + 4)
    for name, sec in results.items():
        rows.append(dict(kind=kind, B=b, T=t, impl=name, sec=sec, rate=n / sec,
                         vs_loop=results["torch loop"] / sec, vs_floor=sec / floor, err=err))
    rows.append(dict(kind=kind, B=b, T=t, impl=f"copy floor ({nbytes / 2**20:.1f} MiB)", sec=floor,
                     rate=n / floor, vs_loop=results["torch loop"] / floor, vs_floor=1.0, err=0.0))


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


C_LOOP, C_LOOP_COMMAND = (None, "skipped (--no-c-loop)") if ARGS.no_c_loop else build_c_loop()


def main():
    if C_LOOP is None:
        print(f"c loop: {C_LOOP_COMMAND}", flush=True)
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
            f"blocked row tile: {scans.ROW_TILE_ELEMENTS} elements\n"
            f"c loop: {C_LOOP_COMMAND}\n"
            f"total time: {time.perf_counter() - t_start:.0f} s; max relative error vs NumPy loop: "
            f"{max(r['err'] for r in rows):.2g}")
    print(meta)
    print(text)
    if ARGS.markdown:
        with open(ARGS.markdown, "w") as f:
            f.write(f"```\n{meta}\n```\n\n{text}\n")


if __name__ == "__main__":
    main()
