"""Tests for jaxrl_agent.advantages: hand-computed values, independent references,
serial == associative, jit/vmap/grad, compile counts, bad input."""

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from jaxrl_agent import advantages as adv
from subprocess_helpers import assert_prints_ok

METHODS = adv.METHODS


def _np(x):
    return np.asarray(x)


# Python-scalar arguments are static; one compilation per function, shapes and
# static values, shared by all tests (eager op-by-op dispatch costs far more).
STATIC = ("gamma", "lambda_", "method", "num_groups", "num_steps", "eps", "shift_mean")


@functools.cache
def jitted(fn):
    names = [n for n in STATIC if n in inspect.signature(fn).parameters]
    return jax.jit(fn, static_argnames=names)


# ----------------------------------------------------------------------------
# Independent references.


def np_gae(r, v, m, gamma, lambda_, boundary):
    """Plain NumPy loop over the full (uncompressed) row, one row at a time."""
    out = np.zeros_like(r, dtype=np.float64)
    for b in range(r.shape[0]):
        next_v, acc, pending = float(boundary[b]), 0.0, 0.0
        for t in reversed(range(r.shape[1])):
            if m[b, t]:
                delta = r[b, t] + pending + gamma * next_v - v[b, t]
                acc = delta + gamma * lambda_ * acc
                out[b, t] = acc
                next_v, pending = v[b, t], 0.0
            else:
                pending += r[b, t]
    return out


def rlax_gae(r, v, m, gamma, lambda_, boundary):
    """rlax GAE on the compressed sequence of masked tokens (rewards folded)."""
    out = np.zeros_like(r, dtype=np.float64)
    for b in range(r.shape[0]):
        idx = np.flatnonzero(m[b])
        if idx.size == 0:
            continue
        ends = np.append(idx[1:], r.shape[1])
        r_c = np.array([r[b, i:e].sum() for i, e in zip(idx, ends)], np.float32)
        v_c = np.append(v[b, idx], boundary[b]).astype(np.float32)
        a = rlax.truncated_generalized_advantage_estimation(
            r_c, np.full_like(r_c, gamma), lambda_, v_c)
        out[b, idx] = np.asarray(a)
    return out


def _random_episode(rng, b, t, p_mask=0.6):
    r = rng.normal(size=(b, t)).astype(np.float32)
    v = rng.normal(size=(b, t)).astype(np.float32)
    m = rng.random((b, t)) < p_mask
    m[0] = False  # one all-masked row
    return r, v, m


# ----------------------------------------------------------------------------
# Token-level GAE.


@pytest.mark.parametrize("method", METHODS)
def test_gae_hand_computed_with_observation_token(method):
    # Masked tokens 0, 1, 3; token 2 is a tool observation (its value 9 is never used),
    # token 4 is padding. gamma=0.9, lambda=0.8, terminated.
    # delta3 = 1 - .3 = .7; A3 = .7
    # delta1 = .9*.3 - .4 = -.13; A1 = -.13 + .72*.7 = .374
    # delta0 = .9*.4 - .5 = -.14; A0 = -.14 + .72*.374 = .12928
    r = jnp.array([[0.0, 0.0, 0.0, 1.0, 0.0]])
    v = jnp.array([[0.5, 0.4, 9.0, 0.3, 0.0]])
    m = jnp.array([[1, 1, 0, 1, 0]], bool)
    a, ret = jitted(adv.gae)(r, v, m, gamma=0.9, lambda_=0.8, method=method)
    np.testing.assert_allclose(_np(a), [[0.12928, 0.374, 0.0, 0.7, 0.0]], rtol=1e-5)
    np.testing.assert_allclose(_np(ret), [[0.62928, 0.774, 0.0, 1.0, 0.0]], rtol=1e-5)
    assert _np(a)[0, 2] == 0.0 and _np(ret)[0, 4] == 0.0


@pytest.mark.parametrize("method", METHODS)
def test_gae_truncation_vs_termination(method):
    # Response with no EOS: row 0 truncated (bootstrap 2.0), row 1 terminated.
    # gamma=.9, lambda=.5. Truncated: delta1 = 1 + .9*2 - .6 = 2.2, A0 = .04 + .45*2.2 = 1.03.
    # Terminated: delta1 = 1 - .6 = .4, A0 = .04 + .45*.4 = .22.
    r = jnp.array([[0.0, 1.0], [0.0, 1.0]])
    v = jnp.array([[0.5, 0.6], [0.5, 0.6]])
    m = jnp.ones((2, 2), bool)
    a, ret = jitted(adv.gae)(r, v, m, gamma=0.9, lambda_=0.5, bootstrap_value=jnp.array([2.0, 2.0]),
                     truncated=jnp.array([True, False]), method=method)
    np.testing.assert_allclose(_np(a), [[1.03, 2.2], [0.22, 0.4]], rtol=1e-5)
    np.testing.assert_allclose(_np(ret), [[1.53, 2.8], [0.72, 1.0]], rtol=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_gae_rewards_on_unmasked_tokens(method):
    # Prompt reward (token 0) dropped; observation reward (token 2) credited to token 1.
    # gamma=lambda=1: r' = [.5, 1] on masked tokens 1, 3 with values .2, .4:
    # delta1 = .5 + .4 - .2 = .7, delta3 = 1 - .4 = .6; A3 = .6, A1 = 1.3.
    r = jnp.array([[3.0, 0.0, 0.5, 1.0]])
    v = jnp.array([[5.0, 0.2, 7.0, 0.4]])
    m = jnp.array([[0, 1, 0, 1]], bool)
    a, _ = jitted(adv.gae)(r, v, m, gamma=1.0, lambda_=1.0, method=method)
    np.testing.assert_allclose(_np(a), [[0.0, 1.3, 0.0, 0.6]], rtol=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_token_estimators_equal_compressed_episode(method):
    # Row 0: prompt(2) action(3) observation(4) action(2) padding(1).
    # Row 1: the same episode with the observation tokens deleted, padded to T.
    rng = np.random.default_rng(1)
    t = 12
    act_r = rng.normal(size=5).astype(np.float32)
    act_v = rng.normal(size=5).astype(np.float32)
    r, v, m = np.zeros((2, t), np.float32), np.full((2, t), 50.0, np.float32), np.zeros((2, t), bool)
    pos_full = [2, 3, 4, 9, 10]
    pos_del = [2, 3, 4, 5, 6]
    for row, pos in ((0, pos_full), (1, pos_del)):
        r[row, pos], v[row, pos], m[row, pos] = act_r, act_v, True
    boot = np.array([0.7, 0.7], np.float32)
    a, ret = jitted(adv.gae)(r, v, m, gamma=0.95, lambda_=0.9, bootstrap_value=boot, method=method)
    np.testing.assert_allclose(_np(a)[0, pos_full], _np(a)[1, pos_del], rtol=1e-6)
    np.testing.assert_allclose(_np(ret)[0, pos_full], _np(ret)[1, pos_del], rtol=1e-6)
    g = jitted(adv.discounted_returns)(r, m, gamma=0.95, method=method)
    np.testing.assert_allclose(_np(g)[0, pos_full], _np(g)[1, pos_del], rtol=1e-6)
    # REINFORCE++ whitens over the batch, so compare each episode alone.
    pp_full = jitted(adv.reinforce_pp)(r[:1], m[:1], gamma=0.95, method=method)
    pp_del = jitted(adv.reinforce_pp)(r[1:], m[1:], gamma=0.95, method=method)
    np.testing.assert_allclose(_np(pp_full)[0, pos_full], _np(pp_del)[0, pos_del], rtol=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_gae_random_vs_rlax_and_numpy(method):
    rng = np.random.default_rng(0)
    r, v, m = _random_episode(rng, 5, 40)
    boot = rng.normal(size=5).astype(np.float32)
    trunc = np.array([True, False, True, False, True])
    boundary = np.where(trunc, boot, 0.0)
    a, ret = jitted(adv.gae)(r, v, m, gamma=0.97, lambda_=0.9, bootstrap_value=boot, truncated=trunc,
                     method=method)
    ref_np = np_gae(r, v, m, 0.97, 0.9, boundary)
    ref_rlax = rlax_gae(r, v, m, 0.97, 0.9, boundary)
    np.testing.assert_allclose(ref_np, ref_rlax, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(a), ref_np, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(ret), np.where(m, ref_np + v, 0.0), rtol=1e-4, atol=1e-5)
    assert not np.any(_np(a)[0]) and not np.any(_np(ret)[0])  # all-masked row


def test_methods_agree_relative_1e5():
    rng = np.random.default_rng(2)
    r, v, m = _random_episode(rng, 6, 300, p_mask=0.8)
    boot = rng.normal(size=6).astype(np.float32)
    outs = {}
    for method in METHODS:
        a, ret = jitted(adv.gae)(r, v, m, gamma=0.999, lambda_=0.97, bootstrap_value=boot, method=method)
        g = jitted(adv.discounted_returns)(r, m, gamma=0.999, bootstrap_value=boot, method=method)
        outs[method] = (a, ret, g)
    for method in ("associative", "chunked"):
        for x, y in zip(outs["serial"], outs[method]):
            x, y = _np(x), _np(y)
            assert np.max(np.abs(x - y)) <= 1e-5 * np.max(np.abs(x)), method


# ----------------------------------------------------------------------------
# Discounted returns and steps.


@pytest.mark.parametrize("method", METHODS)
def test_discounted_returns_hand_computed(method):
    # Tokens: [action r=1, obs r=.5, action r=2, pad]; gamma=.5.
    # Terminated: G2 = 2, G0 = 1 + .5 + .5*2 = 2.5. Truncated (boot 4): G2 = 2 + .5*4 = 4, G0 = 3.5.
    r = jnp.array([[1.0, 0.5, 2.0, 0.0]] * 2)
    m = jnp.array([[1, 0, 1, 0]] * 2, bool)
    g = jitted(adv.discounted_returns)(r, m, gamma=0.5, bootstrap_value=jnp.array([4.0, 4.0]),
                               truncated=jnp.array([False, True]), method=method)
    np.testing.assert_allclose(_np(g), [[2.5, 0, 2.0, 0], [3.5, 0, 4.0, 0]], rtol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_step_gae_and_returns_hand_computed(method):
    # Turns 0, 1 real, turn 2 padding; outcome reward 1 on the last turn; gamma=.9, lambda=.5.
    # delta1 = 1 - .8 = .2, A1 = .2; delta0 = .9*.8 - .5 = .22, A0 = .22 + .45*.2 = .31.
    sr = jnp.array([[0.0, 1.0, 0.0]])
    sv = jnp.array([[0.5, 0.8, 0.0]])
    sm = jnp.array([[1, 1, 0]], bool)
    a, ret = jitted(adv.step_gae)(sr, sv, sm, gamma=0.9, lambda_=0.5, method=method)
    np.testing.assert_allclose(_np(a), [[0.31, 0.2, 0.0]], rtol=1e-5)
    np.testing.assert_allclose(_np(ret), [[0.81, 1.0, 0.0]], rtol=1e-5)
    # Returns: terminated [.9, 1]; truncated with bootstrap 2: G1 = 2.8, G0 = 2.52.
    g = jitted(adv.step_discounted_returns)(sr, sm, gamma=0.9, method=method)
    np.testing.assert_allclose(_np(g), [[0.9, 1.0, 0.0]], rtol=1e-6)
    g = jitted(adv.step_discounted_returns)(sr, sm, gamma=0.9, bootstrap_value=jnp.array([2.0]),
                                    truncated=jnp.array([True]), method=method)
    np.testing.assert_allclose(_np(g), [[2.52, 2.8, 0.0]], rtol=1e-6)


def test_step_values_and_broadcast_hand_computed():
    # prompt(2), turn 0: action tokens 2,3 + observation 4; turn 1: action 5,6 + obs 7.
    values = jnp.arange(10.0, 18.0)[None]
    step_ids = jnp.array([[-1, -1, 0, 0, 0, 1, 1, 1]])
    loss_mask = jnp.array([[0, 0, 1, 1, 0, 1, 1, 0]], bool)
    sv = jitted(adv.step_values_from_token_values)(values, step_ids, loss_mask, num_steps=3)
    np.testing.assert_array_equal(_np(sv), [[12.0, 15.0, 0.0]])  # turn 2 has no action
    tok = jitted(adv.broadcast_step_advantages)(jnp.array([[1.5, -2.0, 7.0]]), step_ids, loss_mask)
    np.testing.assert_array_equal(_np(tok), [[0, 0, 1.5, 1.5, 0, -2.0, -2.0, 0]])
    ep = jitted(adv.broadcast_episode_advantages)(jnp.array([3.0]), loss_mask)
    np.testing.assert_array_equal(_np(ep), [[0, 0, 3, 3, 0, 3, 3, 0]])


# ----------------------------------------------------------------------------
# Groups.

# Rows: group ids out of order and non-contiguous; group 0 = rows 1, 5, 7 with scores
# 0, 3, 6 (mean 3, unbiased std 3); group 1 = rows 3, 4 constant; group 2 = rows 0, 2
# constant; group 3 singleton; group 4 empty; row 8 masked; row 9 has id -1.
SCORES = jnp.array([1.0, 0.0, 1.0, 2.0, 2.0, 3.0, 5.0, 6.0, 100.0, 7.0])
GROUP_IDS = jnp.array([2, 0, 2, 1, 1, 0, 3, 0, 0, -1], jnp.int32)
MASK = jnp.array([True] * 8 + [False, True])


def _expect(values_by_row):
    out = np.zeros(10, np.float32)
    for i, x in values_by_row.items():
        out[i] = x
    return out


def test_grpo_hand_computed():
    a = jitted(adv.grpo)(SCORES, GROUP_IDS, num_groups=5, mask=MASK, eps=1e-6)
    s = 3.0 + 1e-6
    np.testing.assert_allclose(_np(a), _expect({1: -3.0 / s, 5: 0.0, 7: 3.0 / s}), rtol=1e-6)
    assert np.all(_np(a)[[0, 2, 3, 4, 6, 8, 9]] == 0.0)  # exactly 0


def test_dr_grpo_and_rloo_hand_computed():
    d = jitted(adv.dr_grpo)(SCORES, GROUP_IDS, num_groups=5, mask=MASK)
    np.testing.assert_allclose(_np(d), _expect({1: -3.0, 7: 3.0}), rtol=1e-6)
    # Leave-one-out: 0 - (3+6)/2 = -4.5; 3 - (0+6)/2 = 0; 6 - (0+3)/2 = 4.5.
    r = jitted(adv.rloo)(SCORES, GROUP_IDS, num_groups=5, mask=MASK)
    np.testing.assert_allclose(_np(r), _expect({1: -4.5, 7: 4.5}), rtol=1e-6)
    assert np.all(_np(d)[[0, 2, 3, 4, 6, 8, 9]] == 0.0)
    assert np.all(_np(r)[[0, 2, 3, 4, 6, 8, 9]] == 0.0)


def test_constant_group_is_exactly_zero_with_inexact_mean():
    # 0.1 * 3 / 3 != 0.1 in floating point; the result must still be exactly 0.
    s = jnp.full((3,), 0.1)
    g = jnp.zeros((3,), jnp.int32)
    for fn in (adv.grpo, adv.dr_grpo, adv.rloo):
        assert np.all(_np(jitted(fn)(s, g, num_groups=1)) == 0.0)
    assert np.all(_np(jitted(adv.whiten)(s, jnp.ones(3, bool))) == 0.0)


def test_whiten_hand_computed():
    # Masked entries 1, 2, 3: mean 2, unbiased var 1; the 100 is masked out.
    x = jnp.array([1.0, 2.0, 3.0, 100.0])
    m = jnp.array([True, True, True, False])
    s = np.sqrt(1.0 + 1e-8)
    np.testing.assert_allclose(_np(jitted(adv.whiten)(x, m)), [-1 / s, 0, 1 / s, 0], rtol=1e-6)
    np.testing.assert_allclose(_np(jitted(adv.whiten)(x, m, shift_mean=False)),
                               [2 - 1 / s, 2, 2 + 1 / s, 0], rtol=1e-6)
    assert np.all(_np(jitted(adv.whiten)(x, jnp.zeros(4, bool))) == 0.0)  # all masked


def test_reinforce_pp_hand_computed():
    # gamma=1: returns row 0 = [1, 1, 1], row 1 = [0, 0] (+ one pad). Values {1,1,1,0,0}:
    # mean .6, unbiased var (3*.16 + 2*.36)/4 = .3.
    r = jnp.array([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    m = jnp.array([[1, 1, 1], [1, 1, 0]], bool)
    a = jitted(adv.reinforce_pp)(r, m, gamma=1.0)
    hi, lo = 0.4 / np.sqrt(0.3 + 1e-8), -0.6 / np.sqrt(0.3 + 1e-8)
    np.testing.assert_allclose(_np(a), [[hi, hi, hi], [lo, lo, 0.0]], rtol=1e-5)


def test_reinforce_pp_baseline_hand_computed():
    # Group 0 = rows 0, 1 (mean .5) -> .5, -.5; row 2 singleton -> 0. Masked tokens
    # {.5, -.5, 0, 0}: mean 0, unbiased var .5/3 = 1/6.
    scores = jnp.array([1.0, 0.0, 3.0])
    gid = jnp.array([0, 0, 1], jnp.int32)
    m = jnp.array([[1, 0], [1, 0], [1, 1]], bool)
    a = jitted(adv.reinforce_pp_baseline)(scores, gid, m, num_groups=2)
    x = 0.5 / np.sqrt(1 / 6 + 1e-8)
    np.testing.assert_allclose(_np(a), [[x, 0], [-x, 0], [0, 0]], rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------
# jit, vmap, grad, compile counts.


def test_jit_vmap_grad():
    rng = np.random.default_rng(3)
    r, v, m = _random_episode(rng, 3, 16)
    r2, v2, m2 = (np.stack([x, x[::-1]]) for x in (r, v, m))  # two different batches

    @jax.jit
    def all_methods(r2, v2, m2):  # grad through vmap; one compilation for the three methods
        out = {}
        for method in METHODS:
            def loss(v2, method=method):
                a = jax.vmap(lambda *x: adv.gae(*x, gamma=0.9, lambda_=0.8, method=method)[0])(r2, v2, m2)
                return jnp.sum(a ** 2), a
            out[method] = jax.grad(loss, has_aux=True)(v2)
        return out

    for method, (grad_v, stacked) in all_methods(r2, v2, m2).items():
        for i in range(2):
            ref = np_gae(r2[i], v2[i], m2[i], 0.9, 0.8, np.zeros(3))
            np.testing.assert_allclose(_np(stacked[i]), ref, rtol=1e-5, atol=1e-6, err_msg=method)
        assert np.all(np.isfinite(_np(grad_v)))
        assert not np.any(_np(grad_v)[~m2])  # values of unmasked tokens are never used

    def loss(scores):
        return jnp.sum(adv.grpo(scores, GROUP_IDS, num_groups=5, mask=MASK) ** 2
                       + adv.rloo(scores, GROUP_IDS, num_groups=5, mask=MASK)
                       + adv.whiten(scores, MASK) ** 2)

    g = jax.jit(jax.grad(loss))(SCORES)
    assert np.all(np.isfinite(_np(g)))
    const = jax.grad(lambda s: jnp.sum(adv.grpo(s, jnp.zeros(4, jnp.int32), num_groups=1) ** 2
                                       + adv.whiten(s, jnp.ones(4, bool))))(jnp.ones(4))
    assert np.all(_np(const) == 0.0)


def test_one_compilation_per_shape():
    traces = []

    @jax.jit
    def f(r, v, m, scores, gid):
        traces.append(r.shape)
        a, _ = adv.gae(r, v, m, gamma=0.99, lambda_=0.95, method="associative")
        return a, adv.grpo(scores, gid, num_groups=4)

    rng = np.random.default_rng(4)
    for b, t in ((2, 8), (2, 8), (2, 8), (4, 8), (4, 8)):
        r, v, m = _random_episode(rng, b, t)
        f(r, v, m, rng.normal(size=b).astype(np.float32),
          rng.integers(0, 4, size=b).astype(np.int32))
    assert traces == [(2, 8), (4, 8)]


# ----------------------------------------------------------------------------
# Bad input and the registry.


def test_bad_input_raises_value_error_naming_argument():
    r = jnp.zeros((2, 4))
    m = jnp.ones((2, 4), bool)
    with pytest.raises(ValueError, match="values"):
        adv.gae(r, jnp.zeros((2, 5)), m, gamma=0.9, lambda_=0.9)
    with pytest.raises(ValueError, match="rewards.*rank 2"):
        adv.gae(jnp.zeros(4), jnp.zeros(4), jnp.ones(4, bool), gamma=0.9, lambda_=0.9)
    with pytest.raises(ValueError, match="bootstrap_value"):
        adv.gae(r, r, m, gamma=0.9, lambda_=0.9, bootstrap_value=jnp.zeros(3))
    with pytest.raises(ValueError, match="truncated"):
        adv.gae(r, r, m, gamma=0.9, lambda_=0.9, truncated=jnp.zeros(2, bool))
    with pytest.raises(ValueError, match="gamma"):
        adv.gae(r, r, m, gamma=1.5, lambda_=0.9)
    with pytest.raises(ValueError, match="lambda_"):
        adv.step_gae(r, r, m, gamma=0.9, lambda_=-0.1)
    with pytest.raises(ValueError, match="method"):
        adv.discounted_returns(r, m, gamma=0.9, method="parallel")
    with pytest.raises(ValueError, match="step_mask"):
        adv.step_gae(r, r, jnp.ones((3, 4)), gamma=0.9, lambda_=0.9)
    with pytest.raises(ValueError, match="group_ids"):
        adv.grpo(jnp.zeros(4), jnp.zeros(3, jnp.int32), num_groups=2)
    with pytest.raises(ValueError, match="num_groups"):
        adv.rloo(jnp.zeros(4), jnp.zeros(4, jnp.int32), num_groups=0)
    with pytest.raises(ValueError, match="step_ids"):
        adv.broadcast_step_advantages(jnp.zeros((2, 3)), jnp.zeros((2, 4, 1), jnp.int32), m)
    with pytest.raises(ValueError, match="loss_mask"):
        adv.reinforce_pp_baseline(jnp.zeros(2), jnp.zeros(2, jnp.int32), jnp.ones((3, 4)),
                                  num_groups=1)
    with pytest.raises(ValueError, match="mask"):
        adv.whiten(jnp.zeros(4), jnp.ones(3, bool))
    with pytest.raises(ValueError, match="^eps"):
        adv.whiten(jnp.zeros(4), jnp.ones(4, bool), eps=-1.0)
    with pytest.raises(ValueError, match="^eps"):
        adv.grpo(jnp.zeros(4), jnp.zeros(4, jnp.int32), num_groups=1, eps=-1e-6)
    with pytest.raises(ValueError, match="^num_groups"):
        adv.grpo(jnp.zeros(4), jnp.zeros(4, jnp.int32), num_groups=True)
    for bad in (None, "0.9", 0.5 + 0j):
        with pytest.raises(ValueError, match="^gamma: expected a real scalar"):
            adv.gae(r, r, m, gamma=bad, lambda_=0.9)
    # NumPy scalars and 0-d arrays are range-checked; one gamma per batch, not per row.
    with pytest.raises(ValueError, match=r"^gamma: expected a value in \[0, 1\]"):
        adv.discounted_returns(r, m, gamma=np.array(1.5))
    with pytest.raises(ValueError, match=r"^lambda_: expected a value in \[0, 1\]"):
        adv.gae(r, r, m, gamma=0.9, lambda_=np.float32(1.2))
    for method in METHODS:
        with pytest.raises(ValueError, match=r"^gamma: expected a scalar, got an array of shape \[2\]"):
            adv.gae(r, r, m, gamma=np.array([0.9, 0.5]), lambda_=1.0, method=method)


def test_numpy_integer_sizes_and_64_bit_group_ids():
    scores = np.array([0.0, 1.0, 2.0, 3.0], np.float32)
    a = adv.grpo(scores, np.array([0, 0, 1, 1], np.int64), num_groups=np.int64(2))
    np.testing.assert_allclose(_np(a), [-0.7071, 0.7071, -0.7071, 0.7071], atol=1e-4)
    # 2**32 is outside [0, num_groups): no group, 0 (it must not wrap to id 0 in int32).
    a = adv.grpo(scores, np.array([0, 0, 2**32, 5], np.int64), num_groups=2)
    np.testing.assert_allclose(_np(a), [-0.7071, 0.7071, 0.0, 0.0], atol=1e-4)
    sv = adv.step_values_from_token_values(jnp.ones((1, 3)), jnp.zeros((1, 3), jnp.int32),
                                           jnp.ones((1, 3), bool), num_steps=np.int32(2))
    assert sv.shape == (1, 2)
    # Nested Python lists are read as arrays.
    np.testing.assert_allclose(_np(adv.grpo([1.0, 2.0, 3.0, 3.0], [0, 0, 1, 1], num_groups=2)),
                               [-0.7071, 0.7071, 0.0, 0.0], atol=1e-4)
    np.testing.assert_allclose(_np(adv.gae([[0.0, 1.0]], [[0.0, 0.0]], [[True, True]], gamma=1.0,
                                           lambda_=1.0)[0]), [[1.0, 1.0]])


def test_reinforce_pp_baseline_leaves_masked_episodes_out():
    scores = np.array([1.0, 0.0, 1.0, 1.0, 100.0], np.float32)
    gid = np.array([0, 0, 1, 1, 2], np.int32)
    lm = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 0], [1, 1, 1]], bool)
    keep = np.array([1, 1, 1, 1, 0], bool)
    got = _np(adv.reinforce_pp_baseline(scores, gid, lm, num_groups=3, mask=keep))
    assert not got[4].any()  # the masked episode: 0 on every token
    # ...and out of the whitening: the same as the batch without it.
    ref = _np(adv.reinforce_pp_baseline(scores[:4], gid[:4], lm[:4], num_groups=3))
    np.testing.assert_allclose(got[:4], ref, atol=1e-6)


@pytest.mark.parametrize("lambda_", [0.95, 0.16, 0.1])  # 0.1: blocked falls back to chunked
def test_gae_precision_with_large_value_offsets(lambda_):
    """Values ~1000 with advantages ~0.1: every method within 1e-5 absolute of float64.

    "blocked" and "chunked" centre each row's values (GAE is invariant under a
    constant shift); before that, blocked's error here was ~5e-3 at lambda_ = 0.16.
    """
    rng = np.random.default_rng(7)
    b, t = 4, 512
    v = (1000.0 + 0.1 * rng.normal(size=(b, t))).astype(np.float32)
    r = (0.01 * rng.normal(size=(b, t))).astype(np.float32)
    m = rng.random((b, t)) < 0.7
    boot = np.full(b, 1000.0, np.float32)
    ref = np_gae(r.astype(np.float64), v.astype(np.float64), m, 1.0, lambda_, boot)
    for method in METHODS:
        a, ret = jitted(adv.gae)(r, v, m, gamma=1.0, lambda_=lambda_, bootstrap_value=boot,
                                 method=method)
        assert np.max(np.abs(_np(a) - ref)) < 1e-5, method
        np.testing.assert_allclose(_np(ret), np.where(m, ref + v, 0.0), rtol=1e-6, atol=1e-3)
    # The mask as a compile-time constant (XLA may duplicate the centring computation).
    const = jax.jit(lambda r, v, b: adv.gae(r, v, m, gamma=1.0, lambda_=lambda_,
                                            bootstrap_value=b)[0])
    assert np.max(np.abs(_np(const(r, v, boot)) - ref)) < 1e-5


def test_gamma_gradient_is_finite_with_non_finite_values_off_the_mask():
    r = np.ones((2, 70), np.float32)
    v = np.zeros((2, 70), np.float32)
    v[:, -1] = np.inf
    m = np.ones((2, 70), bool)
    m[:, -1] = False
    grads = {meth: float(jax.grad(lambda g, meth=meth: adv.gae(
        r, v, m, gamma=g, lambda_=0.95, method=meth)[0].sum())(0.99)) for meth in METHODS}
    for meth, g in grads.items():
        np.testing.assert_allclose(g, grads["serial"], rtol=1e-4, err_msg=meth)


def test_float64_discount_keeps_float32_data_under_x64():
    """jax_enable_x64 with float32 data and a NumPy float64 gamma: float32 out, every method."""
    code = (
        "import jax; jax.config.update('jax_enable_x64', True)\n"
        "import numpy as np, jax.numpy as jnp\n"
        "from jaxrl_agent import advantages as A\n"
        "r = np.ones((2, 70), np.float32); m = np.ones((2, 70), bool)\n"
        "for g in (np.float64(0.99), np.array(0.99), jnp.array(0.99, jnp.float64)):\n"
        "    for meth in A.METHODS:\n"
        "        a, ret = A.gae(r, r * 0, m, gamma=g, lambda_=0.95, method=meth)\n"
        "        d = A.discounted_returns(r, m, gamma=g, method=meth)\n"
        "        assert a.dtype == ret.dtype == d.dtype == np.float32, (meth, a.dtype, d.dtype)\n"
        "print('ok')\n"
    )
    assert_prints_ok(code)


def test_associative_ignores_non_finite_values_off_the_mask():
    r = np.array([[0.0, 0.0, 1.0, 0.0]], np.float32)
    v = np.array([[0.5, 0.5, 0.5, np.inf]], np.float32)
    m = np.array([[1, 1, 1, 0]], bool)
    outs = {meth: _np(adv.gae(r, v, m, gamma=1.0, lambda_=0.95, method=meth)[0]) for meth in METHODS}
    for meth, x in outs.items():
        assert np.all(np.isfinite(x)), meth
        np.testing.assert_allclose(x, outs["serial"], atol=1e-6)


def test_registry():
    assert adv.get_estimator("gae") is adv.gae
    assert adv.get_estimator("rloo") is adv.rloo
    with pytest.raises(ValueError, match="grpo.*rloo"):
        adv.get_estimator("ppo")


def test_float_group_ids_are_rejected():
    """Group ids are integers; 0.5 must not be silently truncated into group 0."""
    with pytest.raises(ValueError, match="group_ids: expected an integer dtype"):
        adv.grpo(jnp.array([1.0, 0.0]), jnp.array([0.5, 1.0]), num_groups=2)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_inside_shard_map(method):
    """Inside jax.shard_map (rows over the 8 fake devices) every method runs, with its
    gradient, and gives the unsharded result: loop carries follow the data's varying axes."""
    from jax.sharding import Mesh, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    rng = np.random.default_rng(11)
    r, v = (jnp.asarray(rng.normal(size=(16, 70)), jnp.float32) for _ in range(2))
    m = jnp.asarray(rng.random((16, 70)) < 0.7)

    def f(r, v, m):
        a, ret = adv.gae(r, v, m, gamma=0.99, lambda_=0.95, method=method)
        g = jax.grad(lambda v2: adv.gae(r, v2, m, gamma=0.99, lambda_=0.95, method=method)[0].sum())(v)
        return a, ret, g, adv.discounted_returns(r, m, gamma=0.9, method=method)

    sharded = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(r, v, m)
    for got, want in zip(sharded, jax.jit(f)(r, v, m)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
