"""Tests for jaxrl_agent.scans: the solvers agree with each other and with a NumPy
loop, on random input with a = 0 (reset) and a = 1 (pass-through) entries; the
"blocked" closed form equals "serial" on edge cases, under jit, vmap and grad."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_agent import scans


@functools.cache
def _solve_all(fn):
    """One jit computing `fn` with every method (one compilation per shape)."""
    return jax.jit(lambda *args: {m: fn(*args, method=m) for m in scans.METHODS})


def np_recurrence(a, b, init):
    x = np.zeros_like(b, dtype=np.float64)
    nxt = init.astype(np.float64)
    for t in reversed(range(b.shape[1])):
        nxt = a[:, t] * nxt + b[:, t]
        x[:, t] = nxt
    return x


def _random(rng, bsz, t):
    a = rng.uniform(0.5, 1.0, size=(bsz, t)).astype(np.float32)
    u = rng.random((bsz, t))
    a[u < 0.1] = 0.0
    a[u > 0.8] = 1.0
    b = rng.normal(size=(bsz, t)).astype(np.float32)
    init = rng.normal(size=bsz).astype(np.float32)
    return a, b, init


def _close(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    assert np.max(np.abs(x - ref)) <= 1e-5 * np.max(np.abs(ref))


@pytest.mark.parametrize("t", [1, 37, 300])  # T = 37: chunks of 4 with left padding
def test_methods_agree_with_numpy(t):
    a, b, init = _random(np.random.default_rng(t), 5, t)
    ref = np_recurrence(a, b, init)
    outs = _solve_all(scans.reverse_linear_recurrence)(a, b, init)
    for method, x in outs.items():
        assert x.shape == (5, t) and x.dtype == jnp.float32, method
        _close(x, ref)
    _close(outs["associative"], outs["serial"])
    _close(outs["chunked"], outs["serial"])


def test_hand_computed_discounted_return():
    # x_2 = 1 + .5 * 4 = 3; x_1 = 0 * 3 + 2 = 2 (reset); x_0 = 1 * 2 + 1 = 3.
    a = np.array([[1.0, 0.0, 0.5]], np.float32)
    b = np.array([[1.0, 2.0, 1.0]], np.float32)
    for x in _solve_all(scans.reverse_linear_recurrence)(a, b, np.array([4.0], np.float32)).values():
        np.testing.assert_allclose(np.asarray(x), [[3.0, 2.0, 3.0]], rtol=1e-6)


def np_masked_gae(r, v, m, init, gamma, gamma_lambda):
    """Full-row loop of the fused recurrence (w: next masked value, x: trace)."""
    x = np.zeros_like(r, dtype=np.float64)
    for i in range(r.shape[0]):
        w, acc, m_next = float(init[i]), 0.0, True
        for t in reversed(range(r.shape[1])):
            acc = (gamma_lambda if m_next else 1.0) * acc + r[i, t] + (gamma * w - v[i, t] if m[i, t] else 0.0)
            x[i, t] = acc
            w, m_next = (v[i, t], True) if m[i, t] else (w, False)
    return x


def test_masked_gae_trace_and_returns_methods_agree():
    rng = np.random.default_rng(3)
    r = rng.normal(size=(4, 70)).astype(np.float32)
    v = rng.normal(size=(4, 70)).astype(np.float32)
    m = rng.random((4, 70)) < 0.6
    m[0] = False
    init = rng.normal(size=4).astype(np.float32)
    ref = np.where(m, np_masked_gae(r, v, m, init, 0.97, 0.97 * 0.9), 0.0)  # 0 where unmasked
    gae = functools.partial(scans.masked_gae_trace, gamma=0.97, gamma_lambda=0.97 * 0.9)
    for x in _solve_all(gae)(r, v, m, init).values():
        _close(x, ref)
    # Returns are the GAE trace with values 0 and lambda_ = 1 on masked positions
    # (elsewhere the two traces differ by design: only masked positions are read).
    ref = np.where(m, np_masked_gae(r, np.zeros_like(v), m, init, 0.97, 0.97), 0.0)
    ret = functools.partial(scans.masked_discounted_returns, gamma=0.97)
    for x in _solve_all(ret)(r, m, init).values():
        _close(np.where(m, x, 0.0), ref)


@pytest.mark.parametrize("lambda_", [0.9, 0.0])  # 0.0: "blocked" falls back to "chunked"
def test_masked_gae_trace_and_returns(lambda_):
    rng = np.random.default_rng(4)
    r, v = (rng.normal(size=(3, 130)).astype(np.float32) for _ in range(2))
    m = rng.random((3, 130)) < 0.5
    init = rng.normal(size=3).astype(np.float32)
    trace = np.where(m, np_masked_gae(r, v, m, init, 0.97, 0.97 * lambda_), 0.0)
    both = functools.partial(scans.masked_gae_trace_and_returns, gamma=0.97,
                             gamma_lambda=0.97 * lambda_)
    for method, (x, ret) in _solve_all(both)(r, v, m, init).items():
        _close(x, trace)
        _close(ret, np.where(m, trace + v, 0.0))
        assert not np.any(np.asarray(ret)[~m]), method  # exactly 0 off the mask


def test_bad_input_names_argument():
    a = jnp.ones((2, 3))
    with pytest.raises(ValueError, match="b: expected"):
        scans.reverse_linear_recurrence(a, jnp.ones((2, 4)), jnp.zeros(2))
    with pytest.raises(ValueError, match="init"):
        scans.reverse_linear_recurrence(a, a, jnp.zeros(3))
    with pytest.raises(ValueError, match="method"):
        scans.reverse_linear_recurrence(a, a, jnp.zeros(2), method="parallel")
    with pytest.raises(ValueError, match="mask"):
        scans.masked_gae_trace(a, a, jnp.ones((2, 4), bool), jnp.zeros(2), gamma=1.0, gamma_lambda=1.0)


# ----------------------------------------------------------------------------
# "blocked": the closed form per block, against "serial".

# (gamma, lambda_): the benchmark's, gamma*lambda_ = 0.5, 0.0 and 1.0 (the last two: the
# fallback and no decay), and the smallest gamma*lambda_ that runs the closed form.
DECAYS = ((0.99, 0.95), (1.0, 0.5), (0.99, 0.0), (1.0, 1.0), (1.0, scans.BLOCKED_MIN_DECAY))


@functools.cache
def _blocked_and_serial():
    """One jit per shape; gamma and gamma_lambda are traced (lax.cond picks the branch)."""
    def f(r, v, m, init, gamma, gamma_lambda):
        out = {}
        for method in ("blocked", "serial"):
            out[method] = (
                scans.masked_gae_trace(r, v, m, init, gamma=gamma, gamma_lambda=gamma_lambda,
                                       method=method),
                jnp.where(m, scans.masked_discounted_returns(r, m, init, gamma=gamma_lambda,
                                                             method=method), 0.0))
        return out
    return jax.jit(f)


def _edge_rows(rng, bsz, t):
    r = rng.normal(size=(bsz, t)).astype(np.float32)
    v = rng.normal(size=(bsz, t)).astype(np.float32)
    m = rng.random((bsz, t)) < 0.6
    m[0] = False  # no masked position
    m[1] = True  # all masked
    if t > 1:
        m[2, : t // 2] = False  # a long unmasked run (crosses blocks)
    init = rng.normal(size=bsz).astype(np.float32)
    return r, v, m, init


# T = 1, 5 < BLOCK; 64 = BLOCK; 65, 200 not multiples; 1000: several blocks and chunks of carries.
@pytest.mark.parametrize("t", [1, 5, 64, 65, 200, 1000])
def test_blocked_equals_serial(t):
    r, v, m, init = _edge_rows(np.random.default_rng(t), 4, t)
    for gamma, lambda_ in DECAYS:
        out = _blocked_and_serial()(r, v, m, init, np.float32(gamma), np.float32(gamma * lambda_))
        for got, ref in zip(out["blocked"], out["serial"]):
            assert got.shape == (4, t) and got.dtype == jnp.float32
            _close(got, ref)
        # the GAE trace also against the independent NumPy loop
        _close(out["blocked"][0], np.where(m, np_masked_gae(r, v, m, init, gamma, gamma * lambda_), 0))


def test_blocked_python_scalars_and_empty():
    r, v, m, init = _edge_rows(np.random.default_rng(7), 4, 130)
    for gamma, lambda_ in DECAYS:  # static decays choose the branch at trace time
        got = scans.masked_gae_trace(r, v, m, init, gamma=gamma, gamma_lambda=gamma * lambda_,
                                     method="blocked")
        _close(got, np.where(m, np_masked_gae(r, v, m, init, gamma, gamma * lambda_), 0))
    empty = np.zeros((3, 0), np.float32)
    x = scans.masked_gae_trace(empty, empty, empty.astype(bool), np.zeros(3, np.float32),
                               gamma=0.9, gamma_lambda=0.8, method="blocked")
    assert x.shape == (3, 0)
    assert scans.masked_discounted_returns(empty, empty.astype(bool), np.zeros(3, np.float32),
                                           gamma=0.9, method="blocked").shape == (3, 0)


def test_blocked_vmap_grad_and_one_compilation():
    rng = np.random.default_rng(11)
    stacked = [_edge_rows(rng, 3, 150) for _ in range(2)]
    r2, v2, m2, init2 = (np.stack(x) for x in zip(*stacked))
    traces = []

    @jax.jit
    def f(r2, v2, m2, init2, gamma, lambda_):
        traces.append(r2.shape)
        out = {}
        for method in ("blocked", "serial"):
            def total(r2, v2, method=method):  # sum of advantages, vmapped over the stack
                x = jax.vmap(lambda *a: scans.masked_gae_trace(
                    *a, gamma=gamma, gamma_lambda=gamma * lambda_, method=method))(r2, v2, m2, init2)
                return jnp.sum(x), x
            out[method] = jax.grad(total, argnums=(0, 1), has_aux=True)(r2, v2)
        return out

    for gamma, lambda_ in ((0.99, 0.95), (0.9, 0.7)):
        out = f(r2, v2, m2, init2, np.float32(gamma), np.float32(lambda_))
        (g_r, g_v), x = out["blocked"]
        (ref_r, ref_v), ref_x = out["serial"]
        for i in range(2):
            _close(x[i], np.where(m2[i], np_masked_gae(r2[i], v2[i], m2[i], init2[i], gamma,
                                                       gamma * lambda_), 0))
        _close(x, ref_x)
        _close(g_r, ref_r)
        _close(g_v, ref_v)
    assert traces == [(2, 3, 150)]  # traced gamma / lambda_: one compilation for both settings


# B = 7 with tiles of R = 3 rows: tiles at rows 0, 3 and 4 (the last overlaps); B = 6: two exact
# tiles; B = 1: one tile, no loop.
@pytest.mark.parametrize("bsz", [7, 6, 1])
def test_blocked_row_tiles(bsz, monkeypatch):
    t = 200
    monkeypatch.setattr(scans, "ROW_TILE_ELEMENTS", 3 * t)
    r, v, m, init = _edge_rows(np.random.default_rng(bsz), max(bsz, 3), t)
    r, v, m, init = r[:bsz], v[:bsz], m[:bsz], init[:bsz]
    gamma, lambda_ = 0.99, 0.95

    def f(r, v, m, init, method):
        return (scans.masked_gae_trace(r, v, m, init, gamma=gamma, gamma_lambda=gamma * lambda_,
                                       method=method),
                jnp.where(m, scans.masked_discounted_returns(r, m, init, gamma=gamma, method=method),
                          0.0))

    jaxpr = str(jax.make_jaxpr(functools.partial(f, method="blocked"))(r, v, m, init))
    assert ("f32[3,200]" in jaxpr) == (bsz > 3)  # [R, T] tiles exactly when B exceeds R
    got = jax.jit(functools.partial(f, method="blocked"))(r, v, m, init)
    ref = jax.jit(functools.partial(f, method="serial"))(r, v, m, init)
    for x, y in zip(got, ref):
        assert x.shape == (bsz, t)
        _close(x, y)
    _close(got[0], np.where(m, np_masked_gae(r, v, m, init, gamma, gamma * lambda_), 0))

    def total(r, v, method):  # gradients flow through the tile loop
        return jnp.sum(jax.vmap(lambda *a: scans.masked_gae_trace(
            *a, gamma=gamma, gamma_lambda=gamma * lambda_, method=method))(r, v, m[None], init[None]))

    g_blocked = jax.jit(jax.grad(functools.partial(total, method="blocked"), argnums=(0, 1)))(
        r[None], v[None])
    g_serial = jax.jit(jax.grad(functools.partial(total, method="serial"), argnums=(0, 1)))(
        r[None], v[None])
    for x, y in zip(g_blocked, g_serial):
        _close(x, y)


def test_discounts_must_be_scalars():
    r = np.zeros((2, 5), np.float32)
    m = np.ones((2, 5), bool)
    for method in scans.METHODS:
        with pytest.raises(ValueError, match="gamma: expected a scalar"):
            scans.masked_gae_trace_and_returns(r, r, m, np.zeros(2), gamma=np.array([0.9, 0.8]),
                                               gamma_lambda=0.5, method=method)
        with pytest.raises(ValueError, match="gamma_lambda: expected a scalar"):
            scans.masked_gae_trace_and_returns(r, r, m, np.zeros(2), gamma=0.9,
                                               gamma_lambda=np.array([0.5, 0.4]), method=method)
        with pytest.raises(ValueError, match="gamma: expected a scalar"):
            scans.masked_discounted_returns(r, m, np.zeros(2), gamma=np.array([0.9, 0.8]),
                                            method=method)
