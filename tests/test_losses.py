"""Tests for jaxrl_agent.losses: hand-computed values, clipping, padding,
micro-batch exactness, TIS/MIS, transforms and errors."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_agent import losses

L = np.log


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# ---------------------------------------------------------------- aggregation

# Row 0: tokens 1, 2 (sum 3, n 2); row 1: token 4 (sum 4, n 1); row 2 empty.
AGG_L = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], np.float32)
AGG_M = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]], bool)


@pytest.mark.parametrize(
    "mode,want",
    [
        ("token-mean", 7 / 3),  # (3 + 4) / 3 tokens
        ("seq-mean-token-sum", 3.5),  # (3 + 4) / 2 non-empty rows
        ("seq-mean-token-mean", 2.75),  # (3/2 + 4/1) / 2
        ("seq-mean-token-sum-norm", 7 / 6),  # (3 + 4) / T=3 / 2
    ],
)
def test_aggregate_hand_values(mode, want):
    _close(losses.aggregate_loss(AGG_L, AGG_M, mode), want)


def test_aggregate_explicit_normalizers_and_empty_mask():
    _close(losses.aggregate_loss(AGG_L, AGG_M, "token-mean", num_tokens=7), 1.0)
    _close(losses.aggregate_loss(AGG_L, AGG_M, "seq-mean-token-sum", num_seqs=7), 1.0)
    _close(losses.aggregate_loss(AGG_L, AGG_M, "seq-mean-token-sum-norm", max_len=10), 0.35)
    empty = np.zeros_like(AGG_M)
    garbage = AGG_L.copy()
    garbage[0, 0] = np.nan
    for mode in losses.AGG_MODES:
        val, grad = jax.value_and_grad(lambda x: losses.aggregate_loss(x, empty, mode))(garbage)
        assert float(val) == 0.0
        assert np.all(np.asarray(grad) == 0.0)


def test_global_normalizers():
    norms = losses.global_normalizers(AGG_M)
    assert int(norms["num_tokens"]) == 3
    assert int(norms["num_seqs"]) == 2
    assert norms["max_len"] == 3


# ---------------------------------------------------------------------- PPO

# Tokens: (A, r) = (1, 1.5) upper clip, (1, 0.5) free, (-1, 0.5) lower clip,
# (-1, 4) dual clip at c=3, (2, 1) free.
PPO_R = np.array([[1.5, 0.5, 0.5, 4.0, 1.0]], np.float32)
PPO_A = np.array([[1.0, 1.0, -1.0, -1.0, 2.0]], np.float32)
PPO_OLD = np.full((1, 5), -2.0, np.float32)
PPO_LOGP = PPO_OLD + L(PPO_R)
PPO_M = np.ones((1, 5), bool)


def test_ppo_hand_values_and_metrics():
    loss, m = losses.ppo_policy_loss(PPO_LOGP, PPO_OLD, PPO_A, PPO_M)
    # per token: -1.2, -0.5, 0.8, 4.0, -2.0
    _close(loss, 1.1 / 5)
    _close(m["clipfrac_upper"], 0.2)
    _close(m["clipfrac_lower"], 0.2)
    _close(m["clipfrac_dual"], 0.0)
    _close(m["clipfrac"], 0.4)
    _close(m["ratio_mean"], 1.5)
    _close(m["ratio_min"], 0.5)
    _close(m["ratio_max"], 4.0)
    # k3 = mean(r - 1 - log r) = (0.094535 + 2 * 0.193147 + 1.613706 + 0) / 5
    _close(m["approx_kl_k3"], 2.094535 / 5)
    # k2 = mean(0.5 log(r)^2) = (0.082201 + 2 * 0.240227 + 0.960906) / 5
    _close(m["approx_kl_k2"], 1.523561 / 5)


def test_ppo_dual_clip_bounds_negative_advantage_only():
    loss, m = losses.ppo_policy_loss(PPO_LOGP, PPO_OLD, PPO_A, PPO_M, dual_clip=3.0)
    _close(loss, 0.1 / 5)  # the 4.0 token becomes -A * c = 3.0
    _close(m["clipfrac_dual"], 0.2)
    _close(m["clipfrac"], 0.6)
    # Positive advantages: dual clip changes neither loss nor gradient.
    rng = np.random.default_rng(0)
    logp = rng.normal(size=(3, 4)).astype(np.float32)
    old = logp + rng.normal(scale=2.0, size=(3, 4)).astype(np.float32)
    adv = np.abs(rng.normal(size=(3, 4))).astype(np.float32) + 0.1
    mask = np.ones((3, 4), bool)
    f = lambda lp, c: losses.ppo_policy_loss(lp, old, adv, mask, dual_clip=c)[0]  # noqa: E731
    _close(f(logp, 3.0), f(logp, None))
    _close(jax.grad(f)(logp, 3.0), jax.grad(f)(logp, None))
    # Negative advantage with a huge ratio: bounded by -A * c, gradient zero.
    big = np.array([[math.log(100.0)]], np.float32)
    args = (big, np.zeros((1, 1), np.float32), -np.ones((1, 1), np.float32), np.ones((1, 1), bool))
    _close(losses.ppo_policy_loss(*args)[0], 100.0, tol=1e-4)
    g = lambda lp: losses.ppo_policy_loss(lp, *args[1:], dual_clip=3.0)[0]  # noqa: E731
    _close(g(big), 3.0)
    _close(jax.grad(g)(big), 0.0)


def test_ppo_clip_higher_asymmetric_bounds():
    r = np.array([[1.5, 1.25, 0.5]], np.float32)
    adv = np.array([[1.0, 1.0, -1.0]], np.float32)
    old = np.zeros((1, 3), np.float32)
    mask = np.ones((1, 3), bool)
    kw = dict(clip_low=0.2, clip_high=0.28, agg_mode="seq-mean-token-sum")
    loss, m = losses.ppo_policy_loss(L(r), old, adv, mask, **kw)
    _close(loss, -1.28 - 1.25 + 0.8)  # upper bound 1.28, lower bound 0.8
    _close(m["clipfrac_upper"], 1 / 3)
    _close(m["clipfrac_lower"], 1 / 3)
    sym, _ = losses.ppo_policy_loss(L(r), old, adv, mask, agg_mode="seq-mean-token-sum")
    _close(sym, -1.2 - 1.2 + 0.8)


def test_ppo_gradient_zero_on_clipped_tokens():
    g = jax.grad(lambda lp: losses.ppo_policy_loss(lp, PPO_OLD, PPO_A, PPO_M, dual_clip=3.0)[0])
    grad = np.asarray(g(PPO_LOGP))[0]
    # d/dlogp of -A r / 5 on free tokens: -0.5/5 and -2/5; zero on the clipped ones.
    _close(grad, [0.0, -0.1, 0.0, 0.0, -0.4])


def _np_ppo(logp, old, adv, mask, cl, ch, c, mode):
    """Independent loop-based numpy PPO with the four aggregation modes."""
    rows = []
    for b in range(logp.shape[0]):
        toks = []
        for t in range(logp.shape[1]):
            if not mask[b, t]:
                continue
            r = math.exp(float(logp[b, t]) - float(old[b, t]))
            a = float(adv[b, t])
            obj = min(r * a, min(max(r, 1 - cl), 1 + ch) * a)
            if c is not None and a < 0:
                obj = max(obj, c * a)
            toks.append(-obj)
        rows.append(toks)
    nonempty = [x for x in rows if x]
    if mode == "token-mean":
        return sum(map(sum, rows)) / sum(map(len, rows))
    if mode == "seq-mean-token-sum":
        return sum(map(sum, nonempty)) / len(nonempty)
    if mode == "seq-mean-token-mean":
        return sum(sum(x) / len(x) for x in nonempty) / len(nonempty)
    return sum(map(sum, nonempty)) / logp.shape[1] / len(nonempty)


@pytest.mark.parametrize("mode", losses.AGG_MODES)
def test_ppo_matches_numpy_reference(mode):
    logp, old, adv, mask = _random_batch(seed=7)
    old = (old + np.random.default_rng(8).normal(scale=1.0, size=old.shape)).astype(np.float32)
    for c in (None, 2.0):
        ours, _ = losses.ppo_policy_loss(
            logp, old, adv, mask, clip_low=0.1, clip_high=0.3, dual_clip=c, agg_mode=mode
        )
        _close(ours, _np_ppo(logp, old, adv, mask, 0.1, 0.3, c, mode))


def test_ppo_matches_rlax():
    try:
        import rlax
    except Exception as e:  # rlax pulls in tensorflow_probability, which may lag jax
        pytest.skip(f"rlax unavailable: {e}")
    rng = np.random.default_rng(1)
    logp = rng.normal(size=(4, 6)).astype(np.float32)
    old = logp + rng.normal(scale=0.3, size=(4, 6)).astype(np.float32)
    adv = rng.normal(size=(4, 6)).astype(np.float32)
    ours = losses.ppo_policy_loss(logp, old, adv, np.ones((4, 6), bool))[0]
    ref = rlax.clipped_surrogate_pg_loss(np.exp(logp - old).ravel(), adv.ravel(), 0.2)
    _close(ours, ref)


def test_empty_mask_gives_zero_and_finite_gradients():
    x = np.full((2, 3), np.nan, np.float32)
    empty = np.zeros((2, 3), bool)
    for mode in losses.AGG_MODES:
        for fn in losses.POLICY_LOSSES.values():
            f = lambda lp: fn(lp, x, x, empty, agg_mode=mode)  # noqa: E731
            (val, m), g = jax.value_and_grad(f, has_aux=True)(x)
            assert float(val) == 0.0 and np.all(np.asarray(g) == 0.0)
            assert all(np.isfinite(v) for v in m.values())
        f = lambda v: losses.value_loss(v, x, x, empty, agg_mode=mode)[0]  # noqa: E731
        val, g = jax.value_and_grad(f)(x)
        assert float(val) == 0.0 and np.all(np.asarray(g) == 0.0)


# ------------------------------------------------------------- GSPO / CISPO

GS_LOGP = np.array([[-1.0, -2.0], [-0.5, 0.0]], np.float32)
GS_OLD = GS_LOGP - np.array([[0.1, 0.3], [-0.2, 0.0]], np.float32)
GS_A = np.array([[1.0, 1.0], [-1.0, -1.0]], np.float32)
GS_M = np.array([[1, 1], [1, 0]], bool)


def test_gspo_hand_values_and_gradient():
    kw = dict(clip_low=0.3, clip_high=0.3)
    f = lambda lp: losses.gspo_policy_loss(lp, GS_OLD, GS_A, GS_M, **kw)  # noqa: E731
    (loss, m), grad = jax.value_and_grad(f, has_aux=True)(GS_LOGP)
    # s_0 = exp(mean(0.1, 0.3)) = 1.221403, s_1 = exp(-0.2) = 0.818731, no clipping.
    _close(loss, (-1.221403 + 0.818731) / 2)
    # Paper's gradient: -A_i s_i / |y_i| / G on each token of row i.
    _close(grad, [[-1.221403 / 4, -1.221403 / 4], [0.818731 / 2, 0.0]])
    _close(m["ratio_max"], 1.221403)
    _close(m["ratio_min"], 0.818731)
    _close(m["clipfrac"], 0.0)
    # Paper-size clip range clips both sequences: loss -1.0004 and +0.9997.
    loss, m = losses.gspo_policy_loss(GS_LOGP, GS_OLD, GS_A, GS_M)
    _close(loss, (-1.0004 + 0.9997) / 2)
    _close(m["clipfrac_upper"], 2 / 3)
    _close(m["clipfrac_lower"], 1 / 3)


@pytest.mark.parametrize("fill", [1e4, -1e4, np.nan, np.inf])
def test_gspo_ignores_padding(fill):
    def run(logp, old, adv):
        kw = dict(clip_low=0.3, clip_high=0.3)
        f = lambda lp: losses.gspo_policy_loss(lp, old, adv, GS_M, **kw)  # noqa: E731
        return jax.value_and_grad(f, has_aux=True)(logp)

    (loss, m), grad = run(GS_LOGP, GS_OLD, GS_A)
    pads = [a.copy() for a in (GS_LOGP, GS_OLD, GS_A)]
    for a in pads:
        a[1, 1] = fill
    (loss2, m2), grad2 = run(*pads)
    _close(loss2, loss)
    _close(grad2, grad)
    for k in m:
        _close(m2[k], m[k])


def test_cispo_passes_gradient_on_clipped_tokens():
    logp = np.array([[L(0.6), L(0.15)]], np.float32)
    old = np.array([[L(0.3), L(0.3)]], np.float32)  # r = 2.0 and 0.5
    adv = np.ones((1, 2), np.float32)
    mask = np.ones((1, 2), bool)
    f = lambda lp, **kw: losses.cispo_policy_loss(lp, old, adv, mask, **kw)[0]  # noqa: E731
    # loss = -(1.28 * log 0.6 + 0.5 * log 0.15) / 2, no lower bound by default.
    _close(f(logp), -(1.28 * L(0.6) + 0.5 * L(0.15)) / 2)
    _close(jax.grad(f)(logp), [[-0.64, -0.25]])
    _close(jax.grad(functools.partial(f, clip_low=0.2))(logp), [[-0.64, -0.4]])
    _, m = losses.cispo_policy_loss(logp, old, adv, mask, clip_low=0.2)
    _close(m["clipfrac_upper"], 0.5)
    _close(m["clipfrac_lower"], 0.5)
    # PPO gives zero gradient on the same upper-clipped token.
    ppo_grad = jax.grad(lambda lp: losses.ppo_policy_loss(lp, old, adv, mask)[0])(logp)
    assert float(ppo_grad[0, 0]) == 0.0


def test_is_weights_multiply_and_stop_gradient():
    w = np.array([[2.0, 0.0, 1.0, 1.0, 0.5]], np.float32)
    for name, fn in losses.POLICY_LOSSES.items():
        base = functools.partial(fn, old_logprobs=PPO_OLD, advantages=PPO_A, loss_mask=PPO_M)
        f = lambda lp, iw: base(lp, is_weights=iw)[0]  # noqa: E731
        plain = jax.grad(lambda lp: base(lp)[0])(PPO_LOGP)
        gw = jax.grad(f, argnums=(0, 1))(PPO_LOGP, w)
        _close(gw[0], plain * w, tol=1e-4)
        assert np.all(np.asarray(gw[1]) == 0.0), name


# ------------------------------------------------------------------------ KL

KL_LOGP = np.array([[-1.0, -2.0]], np.float32)
KL_REF = np.array([[-1.5, -1.0]], np.float32)  # log r = ref - logp = [-0.5, 1]


@pytest.mark.parametrize(
    "kind,want",
    [
        ("k1", [0.5, -1.0]),
        ("k2", [0.125, 0.5]),
        ("mse", [0.125, 0.5]),
        ("abs", [0.5, 1.0]),
        ("k3", [0.106531, 0.718282]),  # e^-0.5 - 1 + 0.5, e - 2
        ("low_var_kl", [0.106531, 0.718282]),
        ("k3+", [0.106531, 0.718282]),
    ],
)
def test_kl_penalty_hand_values(kind, want):
    _close(losses.kl_penalty(KL_LOGP, KL_REF, kind), [want])


def test_kl_k3_plus_gradient_is_k2_gradient_and_kl_loss():
    g = jax.grad(lambda lp: jnp.sum(losses.kl_penalty(lp, KL_REF, "k3+")))(KL_LOGP)
    _close(g, KL_LOGP - KL_REF)
    loss, m = losses.kl_loss(KL_LOGP, KL_REF, np.array([[1, 0]], bool), kind="k3")
    _close(loss, 0.106531)
    _close(m["kl"], 0.106531)


@pytest.mark.parametrize("kind", ["k3", "low_var_kl", "k3+"])
@pytest.mark.parametrize("log_ratio", [50.0, -50.0])
def test_k3_large_log_ratio_finite_value_and_gradient(kind, log_ratio):
    ref = np.zeros((1, 1), np.float32)
    f = lambda lp: jnp.sum(losses.kl_penalty(lp, ref, kind))  # noqa: E731
    val, grad = jax.value_and_grad(f)(np.full((1, 1), log_ratio, np.float32))
    assert np.isfinite(val) and np.all(np.isfinite(grad))
    _close(val, 10.0)  # clamped like verl


# ------------------------------------------------------------------- entropy


def test_entropy_from_logits_hand_values_and_stability():
    rows = [[0.0, 0.0, -np.inf], [0.0, L(3.0), -np.inf], [1e4, 1e4, -np.inf]]
    logits = np.array([rows], np.float32)
    h = losses.entropy_from_logits(logits)
    # log 2; -(0.25 log 0.25 + 0.75 log 0.75); log 2 at large logits.
    _close(h, [[0.693147, 0.562335, 0.693147]])
    g = jax.grad(lambda x: jnp.sum(losses.entropy_from_logits(x)))(logits)
    assert np.all(np.isfinite(g))


@pytest.mark.parametrize("fill", [1e4, np.nan])
def test_entropy_loss_hand_value_and_ignores_padding(fill):
    logits = np.array([[[0.0, 0.0], [0.0, L(3.0)], [5.0, -3.0]]], np.float32)
    mask = np.array([[1, 1, 0]], bool)
    f = lambda x: losses.entropy_loss(x, mask)  # noqa: E731
    (loss, m), grad = jax.value_and_grad(f, has_aux=True)(logits)
    _close(loss, -(0.693147 + 0.562335) / 2)
    _close(m["entropy"], (0.693147 + 0.562335) / 2)
    padded = logits.copy()
    padded[0, 2] = fill
    (loss2, _), grad2 = jax.value_and_grad(f, has_aux=True)(padded)
    _close(loss2, loss)
    _close(grad2, grad)
    assert np.all(np.asarray(grad2)[0, 2] == 0.0)


# --------------------------------------------------------------------- value


def test_value_loss_hand_values():
    v = np.array([[1.5, 0.0, 9.0]], np.float32)
    old = np.array([[1.0, 0.0, 9.0]], np.float32)
    ret = np.array([[2.0, 1.0, 9.0]], np.float32)
    mask = np.array([[1, 1, 0]], bool)
    f = lambda x: losses.value_loss(x, old, ret, mask, clip_range=0.2)  # noqa: E731
    (loss, m), grad = jax.value_and_grad(f, has_aux=True)(v)
    # token 0: v_clip 1.2, 0.5 max(0.25, 0.64) = 0.32 (clipped); token 1: 0.5.
    _close(loss, 0.41)
    _close(grad, [[0.0, -0.5, 0.0]])
    _close(m["vf_clipfrac"], 0.5)
    # Var[R] = 0.25, Var[R - v] = Var([0.5, 1.0]) = 0.0625.
    _close(m["explained_variance"], 0.75)
    unclipped, _ = losses.value_loss(v, old, ret, mask, clip_range=None)
    _close(unclipped, (0.125 + 0.5) / 2)


# ---------------------------------------------------------------- TIS / MIS

IS_OLD = np.array([[L(3.0), L(0.5), L(1.5)], [L(1.2), 0.0, 0.0]], np.float32)
IS_ROLL = np.zeros((2, 3), np.float32)
IS_M = np.array([[1, 1, 1], [1, 0, 0]], bool)


def test_tis_caps_and_stops_gradient():
    w, m = losses.truncated_importance_weights(IS_OLD, IS_ROLL, IS_M, cap=2.0)
    _close(w, [[2.0, 0.5, 1.5], [1.2, 0.0, 0.0]])
    _close(m["is_frac_capped"], 0.25)
    _close(m["is_ratio_mean"], (3 + 0.5 + 1.5 + 1.2) / 4)
    _close(m["is_ratio_min"], 0.5)
    _close(m["is_ratio_max"], 3.0)
    # k3 of rho: (0.901388 + 0.193147 + 0.094535 + 0.017678) / 4
    _close(m["mismatch_kl_k3"], 1.206748 / 4)
    ws, ms = losses.truncated_importance_weights(IS_OLD, IS_ROLL, IS_M, cap=2.0, level="sequence")
    _close(ws, [[2.0, 2.0, 2.0], [1.2, 0.0, 0.0]])  # product 2.25 capped
    _close(ms["is_frac_capped"], 0.5)
    wg, _ = losses.truncated_importance_weights(IS_OLD, IS_ROLL, IS_M, level="geometric")
    _close(wg[0], [2.25 ** (1 / 3)] * 3)
    g = jax.grad(
        lambda o, r: jnp.sum(losses.truncated_importance_weights(o, r, IS_M)[0]), argnums=(0, 1)
    )(IS_OLD, IS_ROLL)
    assert all(np.all(np.asarray(x) == 0.0) for x in g)


def test_mis_masks():
    mis = functools.partial(
        losses.masked_importance_weights, IS_OLD, IS_ROLL, IS_M, low=0.6, high=2.0
    )
    w, m = mis()
    _close(w, [[0.0, 0.0, 1.5], [1.2, 0.0, 0.0]])
    _close(m["is_frac_masked"], 0.5)
    w, _ = mis(apply_ratio=False)
    _close(w, [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    w, m = mis(level="sequence")
    _close(w, [[0.0, 0.0, 0.0], [1.2, 0.0, 0.0]])  # row 0 ratio 2.25 dropped
    _close(m["is_frac_masked"], 0.5)


# ----------------------------------------------- micro-batch accumulation


def _random_batch(seed=0, b=8, t=6):
    rng = np.random.default_rng(seed)
    logp = rng.normal(-1.0, 0.5, size=(b, t)).astype(np.float32)
    old = (logp + rng.normal(scale=0.3, size=(b, t))).astype(np.float32)
    adv = rng.normal(size=(b, t)).astype(np.float32)
    mask = rng.random((b, t)) < 0.7
    mask[2] = False  # an empty row
    mask[5] = True
    return logp, old, adv, mask


def _loss_fns():
    """name -> f(logp, old, adv, mask, agg_mode, **norms) -> loss."""
    def pol(fn, **kw):
        return lambda lp, o, a, m, mode, **n: fn(lp, o, a, m, agg_mode=mode, **kw, **n)[0]

    return {
        "ppo": pol(losses.ppo_policy_loss, clip_low=0.2, clip_high=0.28, dual_clip=3.0),
        "gspo": pol(losses.gspo_policy_loss, clip_low=0.1, clip_high=0.1),
        "cispo": pol(losses.cispo_policy_loss),
        "kl": lambda lp, o, a, m, mode, **n: losses.kl_loss(lp, o, m, agg_mode=mode, **n)[0],
        "value": lambda lp, o, a, m, mode, **n: losses.value_loss(
            lp, o, a, m, agg_mode=mode, **n
        )[0],
        "entropy": lambda lp, o, a, m, mode, **n: losses.entropy_loss(
            jnp.stack([lp, o, a], axis=-1), m, agg_mode=mode, **n
        )[0],
    }


@pytest.mark.parametrize("mode", losses.AGG_MODES)
def test_micro_batch_accumulation_equals_full_batch(mode):
    logp, old, adv, mask = _random_batch()
    norms = losses.global_normalizers(mask)
    for name, f in _loss_fns().items():
        vg = jax.value_and_grad(f)
        full_loss, full_grad = vg(logp, old, adv, mask, mode)
        assert np.all(np.isfinite(full_grad)) and abs(float(full_loss)) > 1e-3, name
        for n_micro in (2, 4):
            parts = [
                vg(logp[i], old[i], adv[i], mask[i], mode, **norms)
                for i in np.split(np.arange(8), n_micro)
            ]
            _close(sum(p[0] for p in parts), full_loss)
            _close(np.concatenate([p[1] for p in parts]), full_grad)
        # Without global normalizers the micro-batch sum is not the full loss.
        if name == "ppo" and mode in ("token-mean", "seq-mean-token-sum"):
            halves = [f(logp[i], old[i], adv[i], mask[i], mode) for i in np.split(np.arange(8), 2)]
            assert abs(float(sum(halves)) - float(full_loss)) > 1e-3


# ------------------------------------------------------------ jit / vmap


def test_jit_vmap_grad():
    logp, old, adv, mask = _random_batch(seed=3)
    for name in ("ppo", "gspo", "cispo"):
        fn = losses.get_policy_loss(name)
        jitted = jax.jit(fn, static_argnames=("agg_mode",))
        eager, _ = fn(logp, old, adv, mask, agg_mode="seq-mean-token-mean")
        _close(jitted(logp, old, adv, mask, agg_mode="seq-mean-token-mean")[0], eager)
        stack = lambda x: np.stack([x, x[::-1]])  # noqa: E731
        vm, vm_metrics = jax.vmap(fn)(stack(logp), stack(old), stack(adv), stack(mask))
        _close(vm[0], fn(logp, old, adv, mask)[0])
        assert vm_metrics["clipfrac"].shape == (2,)
        g = jax.jit(jax.grad(lambda lp: fn(lp, old, adv, mask)[0]))(logp)
        assert np.all(np.isfinite(g)) and np.all(np.asarray(g)[~mask] == 0.0)


# -------------------------------------------------------------- bad input


Z = np.zeros((2, 3), np.float32)
Z4 = (Z, Z, Z, Z)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: losses.ppo_policy_loss(Z, np.zeros((2, 4)), Z, Z), "old_logprobs"),
        (lambda: losses.ppo_policy_loss(Z, Z, Z, np.ones((3, 3))), "loss_mask"),
        (lambda: losses.ppo_policy_loss(Z, Z, Z.T, Z), "advantages"),
        (lambda: losses.gspo_policy_loss(*[np.zeros(6)] * 4), "logprobs"),
        (lambda: losses.ppo_policy_loss(*Z4, is_weights=np.ones((2,))), "is_weights"),
        (lambda: losses.ppo_policy_loss(*Z4, agg_mode="mean"), "agg_mode"),
        (lambda: losses.ppo_policy_loss(*Z4, dual_clip=0.5), "dual_clip"),
        (lambda: losses.cispo_policy_loss(*Z4, clip_high=-0.1), "clip_high"),
        (lambda: losses.aggregate_loss(Z, Z, "sum"), "agg_mode"),
        (lambda: losses.aggregate_loss(Z, Z[:1]), "loss_mask"),
        (lambda: losses.kl_penalty(Z, Z, "k4"), "kind"),
        (lambda: losses.kl_penalty(Z, Z.T), "ref_logprobs"),
        (lambda: losses.kl_loss(Z, Z, Z, agg_mode="x"), "agg_mode"),
        (lambda: losses.entropy_from_logits(Z), "logits"),
        (lambda: losses.entropy_loss(np.zeros((2, 3, 5)), np.ones((2, 4))), "loss_mask"),
        (lambda: losses.value_loss(Z, Z, np.zeros((2,)), Z), "returns"),
        (lambda: losses.value_loss(*Z4, clip_range=-1.0), "clip_range"),
        (lambda: losses.truncated_importance_weights(Z, Z, Z, level="seq"), "level"),
        (lambda: losses.truncated_importance_weights(Z, Z, Z, cap=0.0), "cap"),
        (lambda: losses.masked_importance_weights(Z, Z, Z, low=2.0, high=1.0), "low"),
        (lambda: losses.masked_importance_weights(Z, Z[0], Z), "rollout_logprobs"),
        (lambda: losses.get_policy_loss("grpo"), "policy_loss"),
        # NumPy scalars and 0-d arrays are range-checked like Python numbers.
        (lambda: losses.ppo_policy_loss(*Z4, dual_clip=np.float32(0.5)), "dual_clip"),
        (lambda: losses.ppo_policy_loss(*Z4, clip_low=np.array(-0.1)), "clip_low"),
        (lambda: losses.ppo_policy_loss(*Z4, clip_low=1.5), "clip_low"),
        (lambda: losses.ppo_policy_loss(*Z4, clip_high=None), "clip_high"),
        (lambda: losses.ppo_policy_loss(*Z4, clip_high=np.array([0.2, 0.3])), "clip_high"),
        (lambda: losses.masked_importance_weights(Z, Z, Z, low=2.0, high=np.float32(1.0)), "low"),
        (lambda: losses.truncated_importance_weights(Z, Z, Z, cap=np.float32(float("nan"))), "cap"),
    ],
)
def test_bad_input_raises_value_error_naming_argument(call, match):
    with pytest.raises(ValueError, match=f"^{match}"):
        call()


def test_registry_error_lists_valid_names():
    with pytest.raises(ValueError, match="cispo.*gspo.*ppo"):
        losses.get_policy_loss("nope")
    assert losses.get_policy_loss("gspo") is losses.gspo_policy_loss


def test_mismatch_kl_k3_uses_one_clamped_log_ratio():
    old = np.array([[25.0, 0.0]], np.float32)  # log rho = 25 on token 0, beyond the clamp of 20
    rollout = np.zeros((1, 2), np.float32)
    _, metrics = losses.truncated_importance_weights(old, rollout, np.ones((1, 2), bool))
    k3_token0 = math.exp(20.0) - 1.0 - 20.0  # k3 of the clamped log rho, as the weights use
    _close(metrics["mismatch_kl_k3"] / k3_token0, 0.5)  # mean over 2 tokens; token 1 has k3 = 0
    _close(metrics["mismatch_kl_k1"], -12.5)  # k1 stays unclamped
