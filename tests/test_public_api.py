"""The curated public API imports and every name in __all__ exists."""

import importlib

import jax.numpy as jnp
import numpy as np

import jaxrl_agent


def test_all_names_resolve():
    for name in jaxrl_agent.__all__:
        assert hasattr(jaxrl_agent, name), name


def test_subpackage_apis_resolve():
    for mod in ("jaxrl_agent.models", "jaxrl_agent.learner", "jaxrl_agent.losses"):
        m = importlib.import_module(mod)
        for name in getattr(m, "__all__", []):
            assert hasattr(m, name), f"{mod}.{name}"


def test_top_level_gae_and_loss_run():
    r = jnp.array([[0.0, 0.0, 1.0]])
    v = jnp.zeros((1, 3))
    m = jnp.array([[True, True, True]])
    adv, ret = jaxrl_agent.gae(r, v, m, gamma=1.0, lambda_=1.0)
    np.testing.assert_allclose(np.asarray(adv), [[1.0, 1.0, 1.0]])
    loss, metrics = jaxrl_agent.ppo_policy_loss(jnp.zeros((1, 3)), jnp.zeros((1, 3)), adv, m)
    np.testing.assert_allclose(float(loss), -1.0, rtol=1e-6)
    assert "clipfrac" in metrics


def test_environments_register_with_gymnasium():
    import gymnasium as gym

    import jaxrl_agent.environments  # noqa: F401

    assert "jaxrl_agent/Calculator-v0" in gym.registry
