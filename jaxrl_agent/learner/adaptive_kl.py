"""KL coefficient controllers as optax-style (init, update) pairs.

Adaptive controller of Ziegler et al. 2019, "Fine-Tuning Language Models from
Human Preferences", Sec. 2.2: with target KL `target`, horizon H and the KL
measured on n new samples,

    e_t = clip(KL_t / target - 1, -0.2, 0.2)
    beta_{t+1} = beta_t * (1 + e_t * n / H)
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax.numpy as jnp

from jaxrl_agent.checks import check_positive


class KLControllerState(NamedTuple):
    """coef: [] float32, the current KL coefficient beta."""

    coef: jnp.ndarray


class KLController(NamedTuple):
    """init() -> state; update(state, kl [] float32, n_samples) -> state."""

    init: Callable[[], KLControllerState]
    update: Callable[..., KLControllerState]


def fixed_kl_controller(coef: float) -> KLController:
    """A constant coefficient; update ignores the measured KL."""
    check_positive("kl_coef", coef, allow_zero=True)

    def init():
        return KLControllerState(coef=jnp.asarray(coef, jnp.float32))

    def update(state, kl, n_samples=1):
        del kl, n_samples
        return state

    return KLController(init, update)


def adaptive_kl_controller(init_coef: float, target: float, horizon: float) -> KLController:
    """Ziegler et al. 2019 proportional controller (see module docstring).

    Args:
      init_coef: beta_0 (> 0).
      target: target KL in nats per token (> 0).
      horizon: H, in samples (> 0).

    Raises:
      ValueError: a non-positive argument, naming it.
    """
    check_positive("init_coef", init_coef)
    check_positive("target_kl", target)
    check_positive("kl_horizon", horizon)

    def init():
        return KLControllerState(coef=jnp.asarray(init_coef, jnp.float32))

    def update(state, kl, n_samples=1):
        error = jnp.clip(jnp.asarray(kl, jnp.float32) / target - 1.0, -0.2, 0.2)
        return KLControllerState(coef=state.coef * (1.0 + error * n_samples / horizon))

    return KLController(init, update)
