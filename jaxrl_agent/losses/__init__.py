"""RL losses as pure functions of arrays: `(loss, metrics)`.

    aggregation  aggregate_loss, global_normalizers (micro-batch-exact means)
    policy       ppo_policy_loss (dual-clip, clip-higher), gspo_policy_loss,
                 cispo_policy_loss, POLICY_LOSSES / get_policy_loss
    kl           kl_penalty (k1/k2/k3/abs/mse), kl_loss
    entropy      entropy_from_logits, entropy_loss
    value        value_loss (PPO2 clipped)
    importance   truncated_importance_weights (TIS), masked_importance_weights (MIS)

String options (agg_mode, kind, level, policy loss name) are Python values:
under jit pass them as static arguments or close over them.
"""

from jaxrl_agent.losses.aggregation import AGG_MODES, aggregate_loss, global_normalizers
from jaxrl_agent.losses.entropy import entropy_from_logits, entropy_loss
from jaxrl_agent.losses.importance import (
    IS_LEVELS,
    masked_importance_weights,
    truncated_importance_weights,
)
from jaxrl_agent.losses.kl import KL_KINDS, kl_loss, kl_penalty
from jaxrl_agent.losses.policy import (
    POLICY_LOSSES,
    check_clips,
    cispo_policy_loss,
    get_policy_loss,
    gspo_policy_loss,
    ppo_policy_loss,
)
from jaxrl_agent.losses.value import value_loss

__all__ = [
    "AGG_MODES",
    "IS_LEVELS",
    "KL_KINDS",
    "POLICY_LOSSES",
    "aggregate_loss",
    "check_clips",
    "cispo_policy_loss",
    "entropy_from_logits",
    "entropy_loss",
    "get_policy_loss",
    "global_normalizers",
    "gspo_policy_loss",
    "kl_loss",
    "kl_penalty",
    "masked_importance_weights",
    "ppo_policy_loss",
    "truncated_importance_weights",
    "value_loss",
]
