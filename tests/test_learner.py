"""Learner: micro-batch exactness, mesh invariance, bitwise resume, compile count."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_agent import advantages as adv_lib
from jaxrl_agent.learner import checkpoint as ckpt_lib
from jaxrl_agent.learner import mesh as mesh_lib
from jaxrl_agent.learner import prepare
from jaxrl_agent.learner import train_state as ts
from jaxrl_agent.learner import train_step as tsl
from jaxrl_agent.learner.hparams import LearnerHParams
from jaxrl_agent.models.config import tiny_config
from jaxrl_agent.types import Batch

CFG = tiny_config(vocab_size=128, num_layers=1, dtype="float32")


def make_batch(b=8, t=16, s=2, seed=0, vocab=128):
    """Random Batch: prompt of 3 tokens, two turns of action + observation tokens."""
    r = np.random.default_rng(seed)
    lens = r.integers(t // 2 + 2, t + 1, b)
    seg = (np.arange(t)[None] < lens[:, None]).astype(np.int32)
    step_ids = np.full((b, t), -1, np.int32)
    loss_mask = np.zeros((b, t), bool)
    for i, n in enumerate(lens):
        half = (n - 3) // 2
        step_ids[i, 3:3 + half], step_ids[i, 3 + half:n] = 0, 1
        loss_mask[i, 3:2 + half] = True  # last token of turn 0 is an observation
        loss_mask[i, 3 + half:n] = True
    return Batch(
        tokens=(r.integers(1, vocab, (b, t)) * seg).astype(np.int32),
        loss_mask=loss_mask,
        step_ids=step_ids,
        rollout_logprobs=np.where(loss_mask, r.uniform(-6, -4, (b, t)), 0).astype(np.float32),
        positions=np.where(seg > 0, np.arange(t)[None], 0).astype(np.int32),
        segment_ids=seg,
        step_rewards=r.normal(size=(b, s)).astype(np.float32),
        step_mask=np.ones((b, s), bool),
        weight_versions=np.zeros((b, s), np.int32),
        terminated=np.arange(b) % 2 == 0,
        truncated=np.arange(b) % 2 == 1,
        group_ids=(100 + np.arange(b) // 4).astype(np.int32),
        episode_mask=np.arange(b) < b - 1,  # last row is padding
    )


# lr 5e-4: the mesh test compares 4 Adam updates at atol 1e-5; float-order noise
# grows with lr (about 1.1e-5 at lr 1e-3, 5.6e-6 at 5e-4 on CPU).
HP_STEP = LearnerHParams(estimator="grpo", lr=5e-4, num_minibatches=2, ppo_epochs=2,
                         kl_coef=0.05, adaptive_kl=True, kl_horizon=100.0, entropy_coef=0.01,
                         is_correction="tis")


@pytest.fixture(scope="module")
def one_device_run():
    """Three uninterrupted steps on 1 device.

    Shared (so that train_step / compute_advantages compile once) by the
    micro-batch, GRPO, resume, compile-count and mesh tests.
    """
    mesh = mesh_lib.single_device_mesh()
    step = tsl.make_train_step(CFG, HP_STEP, mesh=mesh)
    prep = tsl.make_compute_advantages(CFG, HP_STEP, mesh=mesh)
    state = ts.init_train_state(CFG, HP_STEP, jax.random.key(0), mesh=mesh)
    ref = jax.tree.map(lambda x: x * 1.01, state.params)
    states, metrics, batches = [jax.tree.map(np.asarray, state)], [], []
    for i in range(3):
        batches.append(jax.tree.map(np.asarray, prep(state, make_batch(seed=i), ref)))
        state, m = step(state, batches[-1])  # donates the old state
        states.append(jax.tree.map(np.asarray, state))
        metrics.append(jax.tree.map(np.asarray, m))
    return dict(mesh=mesh, step=step, prep=prep, ref=ref, states=states, metrics=metrics,
                first_batch=batches[0])


def _grads(hp, state, tb):
    fn = jax.jit(lambda p, v, tb: tsl.minibatch_grads(p, v, tb, jnp.float32(0.1), config=CFG, hp=hp))
    return fn(state.params, state.value_params, tb)


@pytest.fixture(scope="module")
def critic_state():
    """A 1-device TrainState with a critic, shared so that its init compiles once.

    Only params / value_params are read by the tests that use it, so the
    LearnerHParams it was built with (default optimizer, no KL) do not matter.
    """
    hp = LearnerHParams(estimator="gae")
    state = ts.init_train_state(CFG, hp, jax.random.key(0), mesh=mesh_lib.single_device_mesh())
    return jax.tree.map(np.asarray, state)


@pytest.mark.parametrize("estimator,agg_mode", [("gae", "token-mean"), ("grpo", "seq-mean-token-mean")])
def test_microbatches_match_one_minibatch(estimator, agg_mode, request):
    # gae: critic gradients and the token-count normalizer; grpo: no critic and
    # the sequence-count normalizer (the padding row sits in one micro-batch).
    if estimator == "gae":
        hp = LearnerHParams(estimator=estimator, agg_mode=agg_mode, kl_coef=0.1, entropy_coef=0.01,
                            is_correction="tis")
        state = request.getfixturevalue("critic_state")
        ref = jax.tree.map(lambda x: x * 1.01, state.params)
        tb = tsl.make_compute_advantages(CFG, hp)(state, make_batch(), ref)
    else:
        # HP_STEP prepares batches the same way (KL reference, TIS weights):
        # reuse the shared run's first TrainBatch instead of compiling another.
        hp = HP_STEP.replace(agg_mode=agg_mode)
        run = request.getfixturevalue("one_device_run")
        state, tb = run["states"][0], run["first_batch"]
    # Perturb old logprobs so that clipping is active in the comparison.
    tb = tb._replace(old_logprobs=tb.old_logprobs + 0.3 * jnp.sin(jnp.arange(16.0)))
    loss1, m1, g1 = _grads(hp, state, tb)
    loss4, m4, g4 = _grads(dataclasses.replace(hp, num_microbatches=4), state, tb)
    np.testing.assert_allclose(loss4, loss1, atol=1e-6, rtol=0)
    assert set(m4) == set(m1)
    for k in set(tsl.ADDITIVE_METRICS) & set(m1):
        np.testing.assert_allclose(m4[k], m1[k], atol=1e-6, rtol=0)
    assert m1["clipfrac"] > 0 and m1["kl_loss"] > 0
    assert ("value_loss" in m1) == (estimator == "gae")
    assert tb.is_weights is not None
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6, rtol=0), g4, g1)


def test_compute_advantages_matches_estimators(critic_state):
    batch, state = make_batch(), critic_state
    hp = LearnerHParams(estimator="step_gae", gamma=0.9, lambda_=0.8)
    tb = jax.jit(lambda s, b: prepare.compute_advantages(s, b, config=CFG, hp=hp))(state, batch)
    mask = batch.loss_mask & batch.episode_mask[:, None]
    np.testing.assert_array_equal(np.asarray(tb.batch.loss_mask), mask)
    from jaxrl_agent.models.value import compute_values
    raw = compute_values(state.value_params, CFG, batch.tokens, batch.positions, batch.segment_ids)
    values = np.concatenate([np.zeros((8, 1)), np.asarray(raw)[:, :-1]], 1) * batch.segment_ids
    last = batch.segment_ids.sum(1) - 1
    step_values = adv_lib.step_values_from_token_values(values, batch.step_ids, mask, 2)
    step_adv, _ = adv_lib.step_gae(
        batch.step_rewards, step_values, batch.step_mask & batch.episode_mask[:, None],
        gamma=0.9, lambda_=0.8, bootstrap_value=np.asarray(raw)[np.arange(8), last],
        truncated=batch.truncated,
    )
    want = adv_lib.broadcast_step_advantages(step_adv, batch.step_ids, mask)
    np.testing.assert_allclose(tb.advantages, want, atol=1e-6)
    np.testing.assert_allclose(tb.old_values, values, atol=1e-6)
    assert tb.ref_logprobs is None and tb.is_weights is None
    with pytest.raises(ValueError, match="ref_params"):
        prepare.compute_advantages(state, batch, config=CFG, hp=hp.replace(kl_coef=0.1))


def test_compute_advantages_with_the_native_method(critic_state):
    """advantage_method="native" (CPU kernel) gives the default method's advantages and returns."""
    batch, state = make_batch(), critic_state
    outs = {}
    for estimator in ("gae", "step_gae", "reinforce_pp"):
        for method in ("blocked", "native"):
            hp = LearnerHParams(estimator=estimator, gamma=0.95, lambda_=0.9, advantage_method=method)
            outs[estimator, method] = jax.jit(
                lambda s, b, hp=hp: prepare.compute_advantages(s, b, config=CFG, hp=hp))(state, batch)
        blocked, native = outs[estimator, "blocked"], outs[estimator, "native"]
        np.testing.assert_allclose(native.advantages, blocked.advantages, atol=2e-5)
        if estimator != "reinforce_pp":
            np.testing.assert_allclose(native.returns, blocked.returns, atol=2e-5)
    with pytest.raises(ValueError, match="advantage_method.*native"):
        LearnerHParams(advantage_method="nativ")


def test_helpers_by_hand():
    b = make_batch(b=2, t=16)
    b = b._replace(step_rewards=np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    r = np.asarray(prepare.token_rewards_from_steps(jax.tree.map(jnp.asarray, b)))
    for i in range(2):
        for k in range(2):
            last = np.max(np.where(b.loss_mask[i] & (b.step_ids[i] == k))[0])
            assert r[i, last] == b.step_rewards[i, k]
    assert r.sum() == 10.0
    raw = jnp.arange(8.0).reshape(2, 4)
    seg = jnp.array([[1, 1, 1, 0], [1, 1, 1, 1]])
    np.testing.assert_array_equal(prepare.aligned_values(raw, seg), [[0, 0, 1, 0], [0, 4, 5, 6]])
    np.testing.assert_array_equal(prepare.last_token_values(raw, seg), [2, 7])
    groups = prepare._dense_group_ids(jnp.array([7, 3, 7, -1]))
    assert groups[0] == groups[2] and len({int(g) for g in groups}) == 3


def test_grpo_advantages_and_group_remap(one_device_run):
    batch, tb = make_batch(seed=0), one_device_run["first_batch"]
    scores = batch.step_rewards.sum(1)
    adv = adv_lib.grpo(scores, np.arange(8) // 4, num_groups=2, mask=batch.episode_mask)
    mask = batch.loss_mask & batch.episode_mask[:, None]
    np.testing.assert_allclose(tb.advantages, np.where(mask, np.asarray(adv)[:, None], 0), atol=1e-6)


def test_resume_from_checkpoint_is_bitwise(one_device_run, tmp_path):
    run = one_device_run
    mesh, step, prep = run["mesh"], run["step"], run["prep"]
    # Step 2 saved by a fresh (restarted) process, restored, then step 3.
    with ckpt_lib.Checkpointer(tmp_path, save_interval_steps=2) as ck:
        state = jax.device_put(run["states"][2], ts.state_shardings(CFG, HP_STEP, mesh))
        assert ck.save(2, state, {"data_iterator": {"epoch": 0, "index": 16}})
    with ckpt_lib.Checkpointer(tmp_path, create=False) as ck:
        restored, meta = ck.restore(ts.abstract_state(CFG, HP_STEP, mesh))
    assert meta == {"data_iterator": {"epoch": 0, "index": 16}}
    assert int(restored.step) == 2
    restored, m = step(restored, prep(restored, make_batch(seed=2), run["ref"]))
    for k in run["metrics"][2]:
        np.testing.assert_array_equal(m[k], run["metrics"][2][k], err_msg=k)
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, restored), run["states"][3])
    # The adaptive KL coefficient moved and the step counter advanced.
    assert run["states"][3].kl_state.coef != HP_STEP.kl_coef
    assert run["metrics"][2]["lr"] == pytest.approx(HP_STEP.lr)


def _pad_time(tb, t):
    """Right-pads every [B, T] array of a TrainBatch to length t with masked-out tokens."""
    pad = lambda x, v=0: np.pad(np.asarray(x), ((0, 0), (0, t - x.shape[1])), constant_values=v)
    fields = ("tokens", "loss_mask", "step_ids", "rollout_logprobs", "positions", "segment_ids")
    batch = tb.batch._replace(**{k: pad(getattr(tb.batch, k), -1 if k == "step_ids" else 0)
                                 for k in fields})
    per_token = ("old_logprobs", "advantages", "ref_logprobs", "is_weights")
    return tb._replace(batch=batch, **{k: pad(getattr(tb, k)) for k in per_token})


def test_compiles_once_per_bucket(one_device_run):
    step, prep, ref = one_device_run["step"], one_device_run["prep"], one_device_run["ref"]
    state = jax.device_put(one_device_run["states"][-1],
                           ts.state_shardings(CFG, HP_STEP, one_device_run["mesh"]))
    n = step._cache_size()
    state, _ = step(state, prep(state, make_batch(seed=5), ref))
    assert step._cache_size() == n  # same bucket (B, T, S): no recompilation
    # A T=24 batch (padded rather than prepared: only train_step's cache is counted).
    longer = _pad_time(one_device_run["first_batch"], 24)
    state, _ = step(state, longer)
    assert step._cache_size() == n + 1  # a new bucket compiles once
    state, _ = step(state, longer)
    assert step._cache_size() == n + 1
    odd = jax.tree.map(lambda x: x[:5], one_device_run["first_batch"])
    with pytest.raises(ValueError, match="batch_size: 5 rows are not divisible by num_minibatches"):
        step(state, odd)


@pytest.mark.slow
def test_meshes_match_one_device(one_device_run, tmp_path):
    # The 1-device baseline is the shared run's first step (same HP_STEP, key, batch, ref).
    base_params, base_m = one_device_run["states"][1].params, one_device_run["metrics"][0]
    saved = None
    for shape in ((8, 1, 1), (2, 4, 1), (2, 2, 2)):
        mesh = mesh_lib.make_mesh(shape)
        state = ts.init_train_state(CFG, HP_STEP, jax.random.key(0), mesh=mesh)
        ref = jax.tree.map(lambda x: x * 1.01, state.params)
        tb = tsl.make_compute_advantages(CFG, HP_STEP, mesh=mesh)(state, make_batch(seed=0), ref)
        state, m = tsl.make_train_step(CFG, HP_STEP, mesh=mesh)(state, tb)
        for k in base_m:
            np.testing.assert_allclose(m[k], base_m[k], atol=1e-5, rtol=0, err_msg=f"{shape} {k}")
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=0),
                     jax.tree.map(np.asarray, state.params), base_params)
        saved = state if shape == (8, 1, 1) else saved
    # A TrainState saved on (8, 1, 1) restores onto (2, 2, 2) and one device.
    saved_params = jax.tree.map(np.asarray, saved.params)
    with ckpt_lib.Checkpointer(tmp_path) as ck:
        ck.save(1, saved)
        ck.wait()
        for shape in ((2, 2, 2), (1, 1, 1)):
            mesh = mesh_lib.make_mesh(shape, devices=jax.devices()[:1] if shape == (1, 1, 1) else None)
            restored, _ = ck.restore(ts.abstract_state(CFG, HP_STEP, mesh))
            assert restored.params["embed_tokens"].sharding.mesh.shape == mesh.shape
            jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, restored.params),
                         saved_params)


def test_bad_mesh_and_batch_sizes_raise():
    with pytest.raises(ValueError, match=r"mesh_shape: product of \(2, 2, 1\) is 4.*8 devices"):
        mesh_lib.make_mesh((2, 2, 1))
    mesh = mesh_lib.make_mesh((4, 2, 1))
    with pytest.raises(ValueError, match="batch_size: 6 is not divisible by the data-parallel size 8"):
        mesh_lib.check_batch_divisible(6, mesh)
    with pytest.raises(ValueError, match="estimator"):
        LearnerHParams(estimator="ppo")
    with pytest.raises(ValueError, match="kl_in_reward"):
        LearnerHParams(estimator="grpo", kl_in_reward=True, kl_coef=0.1)
    with pytest.raises(ValueError, match=r"^clip_low: expected a value in \[0, 1\), got None"):
        LearnerHParams(policy_loss="ppo", clip_low=None)  # only CISPO has "no lower bound"
    assert LearnerHParams(policy_loss="cispo", clip_low=None).clip_low is None
    with pytest.raises(ValueError, match="^dual_clip"):
        LearnerHParams(dual_clip=1.0)
