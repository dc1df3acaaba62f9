"""Tests for jaxrl_agent.scans: the three solvers agree with each other and with
a NumPy loop, on random input with a = 0 (reset) and a = 1 (pass-through) entries."""

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
    ref = np_masked_gae(r, v, m, init, 0.97, 0.97 * 0.9)
    gae = functools.partial(scans.masked_gae_trace, gamma=0.97, gamma_lambda=0.97 * 0.9)
    for x in _solve_all(gae)(r, v, m, init).values():
        _close(x, ref)
    # Returns are the GAE trace with values 0 and lambda_ = 1 on masked positions
    # (elsewhere the two traces differ by design: only masked positions are read).
    ref = np.where(m, np_masked_gae(r, np.zeros_like(v), m, init, 0.97, 0.97), 0.0)
    ret = functools.partial(scans.masked_discounted_returns, gamma=0.97)
    for x in _solve_all(ret)(r, m, init).values():
        _close(np.where(m, x, 0.0), ref)


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
