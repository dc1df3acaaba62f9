"""Native CPU kernels: the masked GAE recurrence as an XLA FFI custom call.

`method="native"` of `jaxrl_agent.scans` / `jaxrl_agent.advantages` runs the
masked GAE trace and returns (`scans.masked_gae_trace_and_returns`) as one C++
pass per row (jaxrl_agent/csrc/gae_cpu.cc; float32 rows go 4 at a time in
vector lanes), rows handed out to OpenMP threads (OMP_NUM_THREADS; calls under
2**15 elements stay on one thread). It is the CPU path to memory-bandwidth
speed: XLA CPU has no single-pass form of a reverse recurrence (a `lax.scan`
pays a loop iteration per position; the log-depth and blocked forms pay extra
passes and matmuls); measured at 0.7-2.7x the memory-copy floor where
"blocked" is at 2-7x (docs/benchmarks.md). It exists for CPU only; on GPU and
TPU use the pure-JAX methods ("blocked", "chunked", "associative").

The kernel is compiled on first use, once per machine and jaxlib version, with
the C++ compiler in $CXX (default `c++`, C++17; with -fopenmp when the
compiler has OpenMP, else single-threaded, see `threads()`) against the XLA
FFI headers that ship with jaxlib (`jax.ffi.include_dir()`), and cached under
$JAXRL_AGENT_CACHE_DIR (default $XDG_CACHE_HOME/jaxrl_agent or
~/.cache/jaxrl_agent). The library file is written to a temporary name and
renamed into place, so concurrent first uses never load a partial file.

Transformations: jit and vmap (the custom call takes per-row discounts, so a
vmapped discount broadcasts); jvp and grad through `jax.custom_jvp`, whose
tangent is the pure-JAX "blocked" solver's (GAE is linear in rewards, values
and init; the discounts' tangent needs the reference anyway). Under a jit
whose inputs are sharded over several devices the result is correct, but XLA
gathers the rows onto every device first (a custom call has no partitioning
rule; `jax.ffi.register_ffi_target_as_batch_partitionable` did not avoid the
all-gather for these [B, T] operands): in a sharded learner use "blocked", or
call "native" inside `jax.shard_map` on each device's rows.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import os
import pathlib
import platform
import shlex
import subprocess
import tempfile
import threading

import jax
import jax.numpy as jnp
import numpy as np

SOURCE = pathlib.Path(__file__).parent / "csrc" / "gae_cpu.cc"
# -ffp-contract=off: no fused multiply-adds, so the 4-lane and one-row paths (and every
# architecture) round the same way. "-fopenmp" is added when the compiler has it.
CXX_FLAGS = ("-O3", "-std=c++17", "-ffp-contract=off", "-shared", "-fPIC")
_TARGETS = {np.dtype(np.float32): ("jaxrl_agent_gae_f32", "JaxrlAgentGaeF32"),
            np.dtype(np.float64): ("jaxrl_agent_gae_f64", "JaxrlAgentGaeF64")}
_LOCK = threading.Lock()
_STATE: dict[str, object] = {}  # "library" (loaded path) and "threads", or "error" (why not)


def cache_dir() -> pathlib.Path:
    """Where compiled kernels live: $JAXRL_AGENT_CACHE_DIR, else the XDG cache."""
    if os.environ.get("JAXRL_AGENT_CACHE_DIR"):
        return pathlib.Path(os.environ["JAXRL_AGENT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "jaxrl_agent"


def _compiler() -> list[str]:
    """$CXX split as a shell would ("ccache g++" works), default ["c++"].

    Raises:
      RuntimeError: when $CXX is not a valid command line.
    """
    try:
        return shlex.split(os.environ.get("CXX", "")) or ["c++"]
    except ValueError as e:
        raise RuntimeError(f"method='native': $CXX={os.environ['CXX']!r} is not a valid command "
                           f"line ({e})") from None


def library_path() -> pathlib.Path:
    """The cached library for this source, compiler, jaxlib and machine (may not exist yet)."""
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(_compiler()).encode(), " ".join(CXX_FLAGS).encode(),
                 importlib.metadata.version("jaxlib").encode(), jax.__version__.encode(),
                 platform.machine().encode(), jax.ffi.include_dir().encode()):
        key.update(part + b"\0")
    return cache_dir() / f"gae_cpu-{key.hexdigest()[:20]}.so"


def _digest(path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def _stamp(path: pathlib.Path) -> pathlib.Path:
    """The checksum file beside a cached library, written after the library is in place."""
    return path.with_suffix(".sha256")


def _load_cached(path: pathlib.Path):
    """The cached library when it exists and matches its checksum stamp, else None.

    The check keeps a truncated or foreign file (a copied cache, a crash on a
    network file system) away from dlopen, where it could crash the process.
    """
    try:
        if _stamp(path).read_text().strip() != _digest(path):
            return None
        return ctypes.CDLL(str(path))
    except OSError:
        return None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _build(path: pathlib.Path):
    """Compiles SOURCE, checks that the result loads, and puts it in place; returns the library.

    Tries -fopenmp first, then without OpenMP (a compiler without it, or a
    library that does not load). The file is compiled under a temporary name,
    made readable for the cache's other users (mode 0o777 & ~umask), renamed
    into place, then stamped with its checksum (`_load_cached`).

    Raises:
      RuntimeError: naming the compiler command and the end of its output, a
        missing compiler, or an unwritable cache directory.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp.so", dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise RuntimeError(f"method='native': cannot write the kernel cache {path.parent} ({e}); "
                           "set $JAXRL_AGENT_CACHE_DIR to a writable directory") from None
    failures = []
    try:
        for flags in (CXX_FLAGS + ("-fopenmp",), CXX_FLAGS):
            cmd = [*_compiler(), *flags, f"-I{jax.ffi.include_dir()}", str(SOURCE), "-o", tmp]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True)
            except OSError as e:
                raise RuntimeError(f"method='native' needs a C++17 compiler: running {cmd[0]!r} "
                                   f"failed ({e}); install g++ or clang++, or set $CXX") from None
            if proc.returncode != 0:
                tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
                failures.append(f"compiling {SOURCE.name} failed (exit {proc.returncode}): "
                                f"{' '.join(cmd)}\n{tail}")
                continue
            os.chmod(tmp, 0o777 & ~_umask())
            try:
                lib = ctypes.CDLL(tmp)
            except OSError as e:
                failures.append(f"{' '.join(cmd)} built a library that does not load ({e}); "
                                "is $CXX a C++ compiler?")
                continue
            digest = _digest(tmp)
            os.replace(tmp, path)
            stamp_tmp = f"{tmp}.sha256"
            pathlib.Path(stamp_tmp).write_text(digest + "\n")
            os.replace(stamp_tmp, _stamp(path))
            return lib
        raise RuntimeError(f"method='native': {failures[-1]}")
    finally:
        for leftover in (tmp, f"{tmp}.sha256"):
            if os.path.exists(leftover):
                os.unlink(leftover)


def ensure_registered() -> pathlib.Path:
    """Builds (once) and registers the CPU FFI targets; returns the library path.

    Raises:
      RuntimeError: when the kernel cannot be compiled or loaded (no C++17
        compiler, an invalid $CXX, an unwritable cache directory), with the
        reason; the failure is remembered, so later calls raise at once instead
        of recompiling.
    """
    with _LOCK:
        if "library" in _STATE:
            return _STATE["library"]
        if "error" in _STATE:
            raise RuntimeError(_STATE["error"])
        try:
            path = library_path()
            lib = _load_cached(path) or _build(path)
            for target, symbol in _TARGETS.values():
                jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)),
                                            platform="cpu")
        except (RuntimeError, OSError, AttributeError) as e:
            message = str(e) if str(e).startswith("method='native'") else f"method='native': {e}"
            _STATE["error"] = message
            raise RuntimeError(message) from None
        _STATE["library"] = path
        _STATE["threads"] = int(lib.JaxrlAgentGaeThreads())
        return path


def threads() -> int:
    """Threads a large native call uses: OpenMP's team size (OMP_NUM_THREADS), 1 without OpenMP.

    Raises:
      RuntimeError: as `ensure_registered`.
    """
    ensure_registered()
    return _STATE["threads"]


def available() -> tuple[bool, str]:
    """(True, library path) when method="native" can run here, else (False, why)."""
    try:
        return True, str(ensure_registered())
    except RuntimeError as e:
        return False, str(e)


def check_platform() -> None:
    """Raises ValueError unless JAX's default backend is the CPU."""
    backend = jax.default_backend()
    if backend != "cpu":
        raise ValueError(f"method='native' is a CPU kernel, but JAX's default backend is "
                         f"{backend!r}; use method='blocked' (or 'chunked', 'associative') there")


def _ffi_gae(r, v, m, init, gamma, gamma_lambda):
    from jaxrl_agent.scans import _vary_like  # (import cycle)

    target = _TARGETS[np.dtype(r.dtype)][0]
    out = jax.ShapeDtypeStruct(r.shape, r.dtype)
    per_row = [jnp.broadcast_to(jnp.asarray(x, r.dtype), init.shape) for x in (gamma, gamma_lambda)]
    results = jax.ffi.ffi_call(target, (out, out), vmap_method="broadcast_all")(
        r, v, m, init, *per_row)
    # Inside jax.shard_map the custom call's results are not typed as varying; the
    # tangent (from the pure-JAX reference) is, and custom_jvp needs them to agree.
    return tuple(_vary_like(x, r, v, m, init, *per_row) for x in results)


@jax.custom_jvp
def _gae(r, v, m, init, gamma, gamma_lambda):
    return _ffi_gae(r, v, m, init, gamma, gamma_lambda)


@_gae.defjvp
def _gae_jvp(primals, tangents):
    from jaxrl_agent.scans import _gae_blocked  # the pure-JAX reference (import cycle)

    r, v, m, init, gamma, gamma_lambda = primals
    dr, dv, _, dinit, dgamma, dgamma_lambda = tangents
    out = _gae(*primals)
    _, d_out = jax.jvp(lambda r, v, init, g, gl: _gae_blocked(r, v, m, init, g, gl),
                       (r, v, init, gamma, gamma_lambda), (dr, dv, dinit, dgamma, dgamma_lambda))
    return out, d_out


def gae_trace_and_returns(r, v, m, init, gamma, gamma_lambda):
    """(trace, trace + v), 0 where m is false, by the native CPU kernel.

    Args:
      r, v: [B, T] float32 or float64 (same dtype). m: [B, T] bool.
      init: [B], the value after the last position. gamma, gamma_lambda:
        scalars (Python, NumPy or traced).

    Returns:
      (advantages, returns): [B, T] each, dtype of r. The recurrence is the one
      of `scans.masked_gae_trace_and_returns`, in the "serial" order.

    Raises:
      ValueError: off the CPU backend, or for another dtype.
      RuntimeError: when the kernel cannot be built (see `ensure_registered`).
    """
    check_platform()
    if np.dtype(r.dtype) not in _TARGETS:
        raise ValueError(f"method='native': rewards/values must be float32 or float64, got {r.dtype}")
    ensure_registered()
    dtype = r.dtype
    return _gae(r, jnp.asarray(v, dtype), m, jnp.asarray(init, dtype),
                jnp.asarray(gamma, dtype), jnp.asarray(gamma_lambda, dtype))
