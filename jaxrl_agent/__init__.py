"""jaxrl-agent: a JAX-first training stack for agentic RL of language models.

What users import directly:

    import jaxrl_agent as jra
    adv, ret = jra.advantages.gae(rewards, values, loss_mask, gamma=1.0, lambda_=0.95)
    loss, metrics = jra.losses.cispo_policy_loss(logprobs, old_logprobs, adv, loss_mask)

The credit-assignment estimators (`advantages`) and policy losses (`losses`)
are pure, jit/vmap/grad-safe functions of arrays. Heavier parts live in
subpackages imported on demand: `jaxrl_agent.models` (Flax Llama/Qwen, HF
safetensors I/O), `jaxrl_agent.learner` (sharded train_step, checkpoints),
`jaxrl_agent.rollout` (embedded engine, SGLang client, serve),
`jaxrl_agent.agent` (multi-turn actor, batcher), `jaxrl_agent.environments`
(Gymnasium tool environments) and `jaxrl_agent.pipeline` (the main job).
"""

from jaxrl_agent import advantages, losses
from jaxrl_agent.advantages import (
    ESTIMATORS,
    broadcast_episode_advantages,
    broadcast_step_advantages,
    discounted_returns,
    dr_grpo,
    gae,
    get_estimator,
    grpo,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
    step_discounted_returns,
    step_gae,
    step_values_from_token_values,
    whiten,
)
from jaxrl_agent.losses import (
    POLICY_LOSSES,
    aggregate_loss,
    cispo_policy_loss,
    entropy_from_logits,
    entropy_loss,
    get_policy_loss,
    global_normalizers,
    gspo_policy_loss,
    kl_loss,
    kl_penalty,
    masked_importance_weights,
    ppo_policy_loss,
    truncated_importance_weights,
    value_loss,
)
from jaxrl_agent.rollout.engine import GenerateOutput, RolloutEngine, SamplingParams
from jaxrl_agent.types import Batch, Trajectory

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "ESTIMATORS",
    "GenerateOutput",
    "POLICY_LOSSES",
    "RolloutEngine",
    "SamplingParams",
    "Trajectory",
    "advantages",
    "aggregate_loss",
    "broadcast_episode_advantages",
    "broadcast_step_advantages",
    "cispo_policy_loss",
    "discounted_returns",
    "dr_grpo",
    "entropy_from_logits",
    "entropy_loss",
    "gae",
    "get_estimator",
    "get_policy_loss",
    "global_normalizers",
    "grpo",
    "gspo_policy_loss",
    "kl_loss",
    "kl_penalty",
    "losses",
    "masked_importance_weights",
    "ppo_policy_loss",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "rloo",
    "step_discounted_returns",
    "step_gae",
    "step_values_from_token_values",
    "truncated_importance_weights",
    "value_loss",
    "whiten",
]
