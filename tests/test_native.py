"""method="native": the C++ XLA FFI kernel of the masked GAE recurrence (jaxrl_agent.native).

The kernel is also run by every `scans.METHODS` / `advantages.METHODS` test
(hand-computed values, truncation, tool-observation pass-through, gradients);
these tests cover what is particular to it: the thread split, float64, vmap
over a discount, sharded inputs, non-finite values off the mask, the build
cache and the errors.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxrl_agent import advantages as adv
from jaxrl_agent import native, scans
from subprocess_helpers import assert_prints_ok, run_python


def _inputs(b, t, seed=0, density=0.7):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=(b, t)).astype(np.float32)
    v = rng.normal(size=(b, t)).astype(np.float32)
    m = rng.random((b, t)) < density
    init = rng.normal(size=(b,)).astype(np.float32)
    return r, v, m, init


def _numpy_gae(r, v, m, init, gamma, gamma_lambda):
    """The recurrence of `scans.masked_gae_trace_and_returns` as a float64 NumPy loop."""
    b, t = r.shape
    x_out, ret = np.zeros((b, t)), np.zeros((b, t))
    for i in range(b):
        x, w, m_next = 0.0, float(init[i]), True
        for j in reversed(range(t)):
            x = (gamma_lambda if m_next else 1.0) * x + r[i, j] + (gamma * w - v[i, j] if m[i, j] else 0.0)
            if m[i, j]:
                w = float(v[i, j])
                x_out[i, j], ret[i, j] = x, x + v[i, j]
            m_next = bool(m[i, j])
    return x_out, ret


@pytest.mark.parametrize("shape", [(1, 1), (3, 1), (4, 3), (8, 6), (1, 257), (7, 300), (37, 2048),
                                   (130, 513), (9, 4099)])
def test_native_matches_numpy_loop(shape):
    """Shapes from one element to several thread-pool chunks (2**15 elements each), odd row counts."""
    r, v, m, init = _inputs(*shape)
    x, ret = jax.jit(lambda *a: scans.masked_gae_trace_and_returns(
        *a, gamma=0.99, gamma_lambda=0.99 * 0.95, method="native"))(r, v, m, init)
    ref_x, ref_ret = _numpy_gae(r, v, m, init, 0.99, 0.99 * 0.95)
    scale = max(1.0, float(np.abs(ref_x).max()))
    np.testing.assert_allclose(np.asarray(x), ref_x, atol=2e-5 * scale)
    np.testing.assert_allclose(np.asarray(ret), ref_ret, atol=2e-5 * scale)
    assert not np.any(np.asarray(x)[~m]) and not np.any(np.asarray(ret)[~m])


def test_native_close_to_serial_and_deterministic():
    """Equal to "serial" within rounding; two calls (threads in another order) give identical bits."""
    r, v, m, init = _inputs(64, 1024, seed=1)
    f = jax.jit(lambda *a: scans.masked_gae_trace_and_returns(
        *a, gamma=0.97, gamma_lambda=0.9, method="native"))
    first, second = f(r, v, m, init), f(r, v, m, init)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    serial = scans.masked_gae_trace_and_returns(r, v, m, init, gamma=0.97, gamma_lambda=0.9,
                                                method="serial")
    for a, b in zip(first, serial):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_native_four_row_lanes_equal_single_rows_bitwise():
    """float32 runs rows in groups of 4 vector lanes; a row alone (B=1) runs the scalar loop:
    same operations in the same order (built with -ffp-contract=off), so the bits agree,
    whatever the row's lane and T % 4."""
    r, v, m, init = _inputs(6, 1031, seed=9)
    f = jax.jit(lambda *a: scans.masked_gae_trace_and_returns(
        *a, gamma=0.995, gamma_lambda=0.93, method="native"))
    batch = [np.asarray(x) for x in f(r, v, m, init)]
    for i in range(6):
        alone = f(r[i:i + 1], v[i:i + 1], m[i:i + 1], init[i:i + 1])
        for got, want in zip(batch, alone):
            np.testing.assert_array_equal(got[i], np.asarray(want)[0])


def test_native_ignores_non_finite_values_off_the_mask():
    r, v, m, init = _inputs(4, 100, seed=2)
    v = v.copy()
    v[~m] = np.where(np.arange((~m).sum()) % 2, np.inf, np.nan)
    x, ret = adv.gae(r, v, m, gamma=0.99, lambda_=0.95, method="native")
    assert np.all(np.isfinite(np.asarray(x))) and np.all(np.isfinite(np.asarray(ret)))
    ref_x, _ = adv.gae(r, np.where(m, v, 0.0), m, gamma=0.99, lambda_=0.95, method="serial")
    np.testing.assert_allclose(np.asarray(x), np.asarray(ref_x), rtol=1e-5, atol=1e-5)


def test_native_vmap_over_gamma_and_traced_discounts():
    r, v, m, init = _inputs(5, 200, seed=3)
    gammas = jnp.array([0.5, 0.9, 1.0])

    def f(g, method):
        return scans.masked_gae_trace_and_returns(r, v, m, init, gamma=g, gamma_lambda=g * 0.9,
                                                  method=method)

    got = jax.jit(jax.vmap(lambda g: f(g, "native")))(gammas)
    for i, g in enumerate([0.5, 0.9, 1.0]):
        ref = _numpy_gae(r, v, m, init, g, g * 0.9)
        for a, b in zip(got, ref):
            np.testing.assert_allclose(np.asarray(a)[i], b, atol=5e-5)


def test_native_vmap_over_a_stack_of_batches():
    """vmap over an extra leading axis: the kernel treats every leading axis as rows."""
    r, v, m, init = _inputs(6, 64, seed=4)
    stack = lambda x: x.reshape((2, 3) + x.shape[1:])  # noqa: E731
    got = jax.vmap(lambda *a: scans.masked_gae_trace_and_returns(
        *a, gamma=0.9, gamma_lambda=0.8, method="native"))(*map(stack, (r, v, m, init)))
    ref = _numpy_gae(r, v, m, init, 0.9, 0.8)
    np.testing.assert_allclose(np.asarray(got[0]).reshape(6, 64), ref[0], atol=2e-5)


def test_native_gradients_match_serial():
    """jvp/grad go through the pure-JAX "blocked" tangent (custom_jvp): rewards, values, gamma."""
    r, v, m, init = _inputs(3, 150, seed=5)

    def loss(r, v, g, method):
        x, ret = scans.masked_gae_trace_and_returns(r, v, m, init, gamma=g, gamma_lambda=g * 0.95,
                                                    method=method)
        return jnp.sum(x ** 2) + jnp.sum(ret * v)

    g_native = jax.jit(jax.grad(loss, argnums=(0, 1, 2)), static_argnums=3)(r, v, 0.99, "native")
    g_serial = jax.jit(jax.grad(loss, argnums=(0, 1, 2)), static_argnums=3)(r, v, 0.99, "serial")
    for a, b in zip(g_native, g_serial):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)
    fwd = jax.jacfwd(lambda g: loss(r, v, g, "native"))(0.99)
    np.testing.assert_allclose(float(fwd), float(g_serial[2]), rtol=1e-4)


def test_native_under_a_sharded_jit():
    """Rows sharded over the 8 fake CPU devices: same result as the unsharded serial scan.

    Under a plain jit XLA gathers the rows first (documented in jaxrl_agent.native);
    inside shard_map each device runs its own rows, with no all-gather.
    """
    devices = np.array(jax.devices()[:8])
    assert devices.size == 8, "tests/conftest.py sets 8 fake CPU devices"
    mesh = Mesh(devices, ("data",))
    r, v, m, _ = _inputs(16, 96, seed=6)
    rows = NamedSharding(mesh, P("data", None))
    rs, vs, ms = (jax.device_put(x, rows) for x in (r, v, m))
    f = jax.jit(lambda r, v, m: adv.gae(r, v, m, gamma=0.99, lambda_=0.95, method="native"),
                out_shardings=(rows, rows))
    x, ret = f(rs, vs, ms)
    ref_x, ref_ret = adv.gae(r, v, m, gamma=0.99, lambda_=0.95, method="serial")
    np.testing.assert_allclose(np.asarray(x), np.asarray(ref_x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ret), np.asarray(ref_ret), rtol=1e-5, atol=1e-5)

    per_device = jax.jit(jax.shard_map(
        lambda r, v, m: adv.gae(r, v, m, gamma=0.99, lambda_=0.95, method="native"),
        mesh=mesh, in_specs=P("data"), out_specs=P("data")))
    assert "all-gather" not in per_device.lower(rs, vs, ms).compile().as_text()
    x2, ret2 = per_device(rs, vs, ms)
    np.testing.assert_array_equal(np.asarray(x2), np.asarray(x))
    np.testing.assert_array_equal(np.asarray(ret2), np.asarray(ret))


def test_native_discounted_returns_on_the_mask():
    r, _, m, init = _inputs(4, 300, seed=7)
    got = np.asarray(scans.masked_discounted_returns(r, m, init, gamma=0.9, method="native"))
    ref = np.asarray(scans.masked_discounted_returns(r, m, init, gamma=0.9, method="serial"))
    np.testing.assert_allclose(got[m], ref[m], rtol=1e-5, atol=1e-5)
    assert not np.any(got[~m])


def test_native_float64_and_bfloat16():
    """float64 data under jax_enable_x64 runs the f64 kernel; bf16 data is promoted to float32."""
    r, v, m, init = _inputs(3, 500, seed=8)
    x, _ = adv.gae(jnp.asarray(r, jnp.bfloat16), jnp.asarray(v, jnp.bfloat16), m, gamma=0.99,
                   lambda_=0.95, method="native")
    assert x.dtype == jnp.float32
    code = (
        "import jax; jax.config.update('jax_enable_x64', True)\n"
        "import numpy as np\n"
        "from jaxrl_agent import scans\n"
        "rng = np.random.default_rng(0)\n"
        "r, v = rng.normal(size=(2, 3, 400)); m = rng.random((3, 400)) < 0.6; i = np.zeros(3)\n"
        "x, ret = scans.masked_gae_trace_and_returns(r, v, m, i, gamma=0.999, gamma_lambda=0.99,"
        " method='native')\n"
        "s, _ = scans.masked_gae_trace_and_returns(r, v, m, i, gamma=0.999, gamma_lambda=0.99,"
        " method='serial')\n"
        "assert x.dtype == np.float64, x.dtype\n"
        "assert np.max(np.abs(np.asarray(x) - np.asarray(s))) < 1e-12, np.max(np.abs(x - s))\n"
        "print('ok')\n"
    )
    assert_prints_ok(code)


def test_native_build_is_cached_and_atomic(tmp_path, monkeypatch):
    """First use compiles into the cache dir; the next process reuses the file (no temp files left)."""
    monkeypatch.setenv("JAXRL_AGENT_CACHE_DIR", str(tmp_path))
    code = ("from jaxrl_agent import native; ok, path = native.available(); assert ok, path; "
            "print(path)")
    env = {"JAXRL_AGENT_CACHE_DIR": str(tmp_path)}
    first = run_python(code, env)
    assert first.returncode == 0, first.stderr[-2000:]
    path = first.stdout.strip()
    assert os.path.dirname(path) == str(tmp_path) and os.path.exists(path)
    mtime = os.stat(path).st_mtime_ns
    second = run_python(code, env)
    assert second.returncode == 0 and second.stdout.strip() == path
    assert os.stat(path).st_mtime_ns == mtime  # reused, not rebuilt
    stem = os.path.basename(path)[:-len(".so")]
    assert sorted(p.name for p in tmp_path.iterdir()) == [stem + ".sha256", stem + ".so"]
    # readable by the cache's other users as the umask allows (not mkstemp's 0o600)
    assert os.stat(path).st_mode & 0o777 == 0o777 & ~native._umask()
    # A truncated library (a copied cache, a crash on a network file system) fails its
    # checksum and is rebuilt instead of reaching dlopen.
    with open(path, "r+b") as f:
        f.truncate(5000)
    third = run_python(code, env)
    assert third.returncode == 0 and third.stdout.strip() == path, third.stderr[-2000:]
    assert os.path.getsize(path) > 5000


def test_native_without_a_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "_STATE", {})
    monkeypatch.setenv("JAXRL_AGENT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    ok, why = native.available()
    assert not ok and "C++17 compiler" in why and "no-such-compiler" in why
    r, v, m, _ = _inputs(2, 8)
    with pytest.raises(RuntimeError, match="C\\+\\+17 compiler"):
        adv.gae(r, v, m, gamma=0.9, lambda_=0.9, method="native")
    assert list(tmp_path.iterdir()) == []  # no partial library left behind


def test_native_compile_error_names_the_command(tmp_path, monkeypatch):
    fake = tmp_path / "fake-cxx"
    fake.write_text("#!/bin/sh\necho 'gae_cpu.cc:1: error: broken' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(native, "_STATE", {})
    monkeypatch.setenv("JAXRL_AGENT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(fake))
    with pytest.raises(RuntimeError, match=r"(?s)compiling gae_cpu.cc failed \(exit 3\).*broken"):
        native.ensure_registered()
    with pytest.raises(RuntimeError, match="exit 3"):  # remembered, not recompiled
        native.ensure_registered()


def test_native_build_errors_name_the_cause(tmp_path, monkeypatch):
    """A C compiler (builds, does not load), a malformed $CXX, an unwritable cache dir."""
    cases = [
        ({"CXX": "gcc"}, str(tmp_path / "c1"), "does not load.*C\\+\\+ compiler"),
        ({"CXX": "g++ 'unclosed"}, str(tmp_path / "c2"), "\\$CXX=.*not a valid command line"),
        ({}, str(tmp_path / "a-file" / "cache"), "cannot write the kernel cache"),
    ]
    (tmp_path / "a-file").write_text("not a directory")
    for env, cache, pattern in cases:
        monkeypatch.setattr(native, "_STATE", {})
        monkeypatch.setenv("JAXRL_AGENT_CACHE_DIR", cache)
        monkeypatch.delenv("CXX", raising=False)
        for k, val in env.items():
            monkeypatch.setenv(k, val)
        with pytest.raises(RuntimeError, match=f"(?s)method='native'.*{pattern}"):
            native.ensure_registered()


def test_native_reads_any_nonzero_mask_byte_as_true():
    """A bool array whose bytes are 2 (e.g. a uint8 view) is read as True, without undefined C++."""
    r, v, m, init = _inputs(6, 33, seed=10)
    m2 = (m.astype(np.uint8) * 2).view(bool)
    f = jax.jit(lambda *a: scans.masked_gae_trace_and_returns(
        *a, gamma=0.99, gamma_lambda=0.95, method="native"))
    for got, want in zip(f(r, v, m2, init), f(r, v, m, init)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_native_off_cpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    r, v, m, _ = _inputs(2, 8)
    with pytest.raises(ValueError, match="CPU kernel.*'tpu'.*blocked"):
        adv.gae(r, v, m, gamma=0.9, lambda_=0.9, method="native")
