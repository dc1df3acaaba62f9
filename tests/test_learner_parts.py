"""Optimizer schedule and masks, KL controllers, multi-host detection."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_agent.learner import adaptive_kl, distributed, optimizer


def test_schedule_warmup_then_cosine_and_constant():
    s = optimizer.make_schedule(lr=1.0, warmup_steps=4, total_steps=14, schedule="cosine")
    np.testing.assert_allclose([s(i) for i in (0, 2, 4, 9, 14)], [0, 0.5, 1.0, 0.5, 0.0], atol=1e-6)
    c = optimizer.make_schedule(lr=2.0, warmup_steps=2, schedule="constant")
    np.testing.assert_allclose([c(i) for i in (0, 1, 2, 100)], [0, 1, 2, 2], atol=1e-6)
    with pytest.raises(ValueError, match="total_steps"):
        optimizer.make_schedule(lr=1.0, warmup_steps=4, schedule="cosine")
    with pytest.raises(ValueError, match="schedule"):
        optimizer.make_schedule(lr=1.0, schedule="linear")


def test_frozen_params_and_clipping():
    params = {"embed_tokens": jnp.ones((4, 3)), "layer": {"kernel": jnp.ones((3, 3)), "scale": jnp.ones(3)}}
    tx = optimizer.make_optimizer(lr=0.1, schedule="constant", max_grad_norm=1.0,
                                  weight_decay=0.5, trainable_mask=optimizer.freeze_by_name("embed"))
    state = tx.init(params)
    grads = jax.tree.map(lambda p: 100.0 * jnp.ones_like(p), params)
    updates, _ = tx.update(grads, state, params)
    np.testing.assert_array_equal(updates["embed_tokens"], 0.0)
    # Adam's first step moves each trainable entry by -lr (sign of g), plus decay on matrices.
    np.testing.assert_allclose(updates["layer"]["scale"], -0.1, rtol=1e-5)
    np.testing.assert_allclose(updates["layer"]["kernel"], -0.1 - 0.1 * 0.5, rtol=1e-5)
    # eps=1 makes Adam's first step -lr * g / (|g| + 1): the clipped gradient shows.
    # Frozen embeddings do not count toward the norm: 12 trainable entries of 100.
    tx = optimizer.make_optimizer(lr=0.1, schedule="constant", max_grad_norm=1.0, eps=1.0,
                                  trainable_mask=optimizer.freeze_by_name("embed"))
    updates, _ = tx.update(grads, tx.init(params), params)
    g = 1.0 / np.sqrt(12.0)
    np.testing.assert_allclose(updates["layer"]["scale"], -0.1 * g / (g + 1.0), rtol=1e-5)


def test_adaptive_kl_controller_by_hand():
    ctrl = adaptive_kl.adaptive_kl_controller(0.2, target=0.1, horizon=100.0)
    s = ctrl.init()
    s = ctrl.update(s, 0.3, 10)  # error clipped to +0.2: beta *= 1 + 0.2 * 10 / 100
    np.testing.assert_allclose(s.coef, 0.2 * 1.02, rtol=1e-6)
    s = ctrl.update(s, 0.09, 50)  # error -0.1: beta *= 1 - 0.1 * 0.5
    np.testing.assert_allclose(s.coef, 0.2 * 1.02 * 0.95, rtol=1e-6)
    fixed = adaptive_kl.fixed_kl_controller(0.05)
    assert float(fixed.update(fixed.init(), 10.0, 5).coef) == pytest.approx(0.05)
    s = jax.jit(ctrl.update)(ctrl.init(), jnp.float32(0.0), 100)
    np.testing.assert_allclose(s.coef, 0.2 * 0.8, rtol=1e-6)
    with pytest.raises(ValueError, match="target_kl"):
        adaptive_kl.adaptive_kl_controller(0.1, target=0.0, horizon=1.0)


def test_cluster_detection(monkeypatch):
    assert distributed.detect_cluster({}) is None
    assert distributed.detect_cluster({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "1"}) is None
    assert distributed.detect_cluster({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "4"}) == "slurm"
    assert distributed.detect_cluster({"TPU_WORKER_HOSTNAMES": "a,b"}) == "tpu_pod"
    assert distributed.detect_cluster({"TPU_WORKER_HOSTNAMES": "a"}) is None
    assert distributed.maybe_initialize_distributed({}) is False
    with pytest.raises(ValueError, match="JAX_NUM_PROCESSES"):
        distributed.maybe_initialize_distributed({"JAX_COORDINATOR_ADDRESS": "h:1234"})
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
    env = {"JAX_COORDINATOR_ADDRESS": "h:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}
    assert distributed.maybe_initialize_distributed(env) is True
    assert calls == [dict(coordinator_address="h:1234", num_processes=2, process_id=1)]
    assert distributed.is_main_process()
