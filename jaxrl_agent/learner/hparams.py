"""LearnerHParams: every knob of the learner as an explicit frozen dataclass.

Library code receives these values explicitly; only train.py reads an
ml_collections config and builds a LearnerHParams from it.
"""

from __future__ import annotations

import dataclasses

from jaxrl_agent import losses, scans
from jaxrl_agent.checks import check_choice, check_positive, check_scalar
from jaxrl_agent.learner.adaptive_kl import (
    KLController,
    adaptive_kl_controller,
    fixed_kl_controller,
)
from jaxrl_agent.learner.optimizer import SCHEDULES

ESTIMATORS = ("gae", "step_gae", "grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline")
CRITIC_ESTIMATORS = ("gae", "step_gae")
OUTCOME_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline")
IS_CORRECTIONS = (None, "tis", "mis")


@dataclasses.dataclass(frozen=True)
class LearnerHParams:
    """Hyperparameters of compute_advantages and train_step.

    Attributes:
      estimator: advantage estimator, one of ESTIMATORS; 'gae'/'step_gae'
        train a critic (TrainState.value_params).
      gamma, lambda_: discount and GAE lambda (gae, step_gae, reinforce_pp).
      advantage_method: solver of those recurrences, one of scans.METHODS:
        "blocked" (pure JAX, the default: any backend, any sharding) or, on
        CPU, "native" (C++ kernel, fastest there; under a sharded jit XLA
        gathers the rows first, see jaxrl_agent.native).
      whiten_advantages: whiten advantages over the batch's masked tokens
        (gae, step_gae; the other estimators normalize by construction).
      policy_loss: one of losses.POLICY_LOSSES ('ppo', 'gspo', 'cispo').
      clip_low, clip_high: ratio clip range [1 - clip_low, 1 + clip_high]
        (clip-higher when clip_high > clip_low); cispo: clip_low None = no
        lower clip.
      dual_clip: PPO dual-clip constant c > 1 (Ye et al. 2020), or None.
      agg_mode: loss aggregation, one of losses.AGG_MODES.
      kl_coef: KL coefficient beta (initial value if adaptive); 0 disables
        KL and the reference logprobs.
      kl_kind: KL estimator, one of losses.KL_KINDS.
      kl_in_reward: subtract beta * KL(old || ref) from the token rewards
        (gae, step_gae, reinforce_pp) instead of adding a KL loss term.
      adaptive_kl: use the Ziegler et al. 2019 controller with kl_target and
        kl_horizon (samples) instead of a fixed beta.
      entropy_coef: weight of the entropy bonus (loss -= coef * entropy).
      value_coef: weight of the value loss.
      value_clip: PPO2 value clip range, or None.
      is_correction: rollout/learner mismatch correction: None, 'tis'
        (truncated IS, cap tis_cap) or 'mis' (masked IS, [mis_low, mis_high]),
        with ratio pi_old / pi_rollout at is_level ('token', 'sequence', ...).
      ppo_epochs: passes over the batch per train_step.
      num_minibatches: optimizer updates per epoch (batch rows split evenly).
      num_microbatches: gradient-accumulation chunks per minibatch; the loss
        normalizers are computed over the whole minibatch, so this changes
        memory, not the update.
      shuffle: permute rows with the state rng before each epoch.
      temperature: logits / temperature, as the rollout engine sampled.
      logprob_chunk_size: time steps of logits materialized at once.
      lr, value_lr: learning rates (value_lr None: same as lr).
      warmup_steps, total_steps, schedule, end_lr_ratio: optimizer schedule in
        optimizer updates (ppo_epochs * num_minibatches per train_step).
      b1, b2, eps, weight_decay, max_grad_norm: AdamW and clipping.
      frozen_params: parameter-path substrings that are not trained (e.g. 'embed').
    """

    estimator: str = "grpo"
    gamma: float = 1.0
    lambda_: float = 1.0
    advantage_method: str = scans.DEFAULT_METHOD
    whiten_advantages: bool = False
    policy_loss: str = "ppo"
    clip_low: float | None = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    agg_mode: str = "token-mean"
    kl_coef: float = 0.0
    kl_kind: str = "low_var_kl"
    kl_in_reward: bool = False
    adaptive_kl: bool = False
    kl_target: float = 0.1
    kl_horizon: float = 10000.0
    entropy_coef: float = 0.0
    value_coef: float = 0.5
    value_clip: float | None = 0.2
    is_correction: str | None = None
    is_level: str = "token"
    tis_cap: float = 2.0
    mis_low: float = 0.5
    mis_high: float = 2.0
    ppo_epochs: int = 1
    num_minibatches: int = 1
    num_microbatches: int = 1
    shuffle: bool = True
    temperature: float = 1.0
    logprob_chunk_size: int = 256
    lr: float = 1e-6
    value_lr: float | None = None
    warmup_steps: int = 0
    total_steps: int | None = None
    schedule: str = "constant"
    end_lr_ratio: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    frozen_params: tuple[str, ...] = ()

    def __post_init__(self):
        check_choice("estimator", self.estimator, ESTIMATORS)
        check_choice("advantage_method", self.advantage_method, scans.METHODS)
        check_choice("policy_loss", self.policy_loss, tuple(losses.POLICY_LOSSES))
        losses.check_clips(self.clip_low, self.clip_high, self.dual_clip,
                           low_optional=self.policy_loss == "cispo")
        if self.value_clip is not None:
            check_scalar("value_clip", self.value_clip, low=0.0)
        check_scalar("tis_cap", self.tis_cap, low=0.0, low_open=True)
        check_scalar("mis_low", self.mis_low, low=0.0)
        check_scalar("mis_high", self.mis_high, low=self.mis_low, low_open=True)
        check_scalar("eps", self.eps, low=0.0)
        for name in ("b1", "b2"):
            check_scalar(name, getattr(self, name), low=0.0, high=1.0, high_open=True)
        check_choice("agg_mode", self.agg_mode, losses.AGG_MODES)
        check_choice("kl_kind", self.kl_kind, losses.KL_KINDS)
        check_choice("is_correction", self.is_correction, IS_CORRECTIONS)
        check_choice("is_level", self.is_level, losses.IS_LEVELS)
        check_choice("schedule", self.schedule, SCHEDULES)
        for name in ("ppo_epochs", "num_minibatches", "num_microbatches", "logprob_chunk_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        for name in ("kl_coef", "entropy_coef", "value_coef"):
            check_positive(name, getattr(self, name), allow_zero=True)
        check_positive("temperature", self.temperature)
        check_positive("lr", self.lr)
        for name in ("gamma", "lambda_"):
            check_scalar(name, getattr(self, name), low=0.0, high=1.0)
        if self.kl_in_reward and self.estimator in OUTCOME_ESTIMATORS:
            raise ValueError(
                f"kl_in_reward: not defined for the outcome estimator {self.estimator!r}; "
                "expected one of ['gae', 'reinforce_pp', 'step_gae'] or kl_in_reward=False"
            )
        if self.adaptive_kl and self.kl_coef <= 0:
            raise ValueError(f"kl_coef: adaptive_kl needs an initial kl_coef > 0, got {self.kl_coef!r}")
        object.__setattr__(self, "frozen_params", tuple(self.frozen_params))

    @property
    def use_critic(self) -> bool:
        return self.estimator in CRITIC_ESTIMATORS

    @property
    def use_kl(self) -> bool:
        return self.kl_coef > 0

    @property
    def use_kl_loss(self) -> bool:
        return self.use_kl and not self.kl_in_reward

    @property
    def updates_per_step(self) -> int:
        """Optimizer updates per train_step: ppo_epochs * num_minibatches."""
        return self.ppo_epochs * self.num_minibatches

    def kl_controller(self) -> KLController:
        """The (init, update) KL-coefficient controller these settings select."""
        if self.adaptive_kl:
            return adaptive_kl_controller(self.kl_coef, self.kl_target, self.kl_horizon)
        return fixed_kl_controller(self.kl_coef)

    def replace(self, **kw) -> "LearnerHParams":
        return dataclasses.replace(self, **kw)
