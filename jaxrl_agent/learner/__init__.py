"""The sharded, pure-functional learner: TrainState, train_step, mesh, checkpoints.

    mesh          make_mesh(('data', 'fsdp', 'tensor')), batch-size checks
    sharding      LOGICAL_AXIS_RULES and shardings of params / opt state / batch
    optimizer     AdamW + warmup/cosine + clipping + frozen-parameter masks
    adaptive_kl   fixed / Ziegler adaptive KL coefficient as (init, update)
    hparams       LearnerHParams (every knob, explicit)
    train_state   TrainState, init_train_state, state_shardings, abstract_state
    prepare       TrainBatch, compute_advantages (pure)
    loss          learner_loss: policy + KL + entropy + value terms
    train_step    make_train_step, make_compute_advantages (jitted, sharded)
    checkpoint    Checkpointer (orbax), CheckpointError
    distributed   maybe_initialize_distributed, is_main_process
"""

from jaxrl_agent.learner.adaptive_kl import (
    KLController,
    KLControllerState,
    adaptive_kl_controller,
    fixed_kl_controller,
)
from jaxrl_agent.learner.checkpoint import CheckpointError, Checkpointer, abstract_like
from jaxrl_agent.learner.distributed import is_main_process, maybe_initialize_distributed
from jaxrl_agent.learner.hparams import LearnerHParams
from jaxrl_agent.learner.mesh import MESH_AXES, check_batch_divisible, make_mesh, single_device_mesh
from jaxrl_agent.learner.optimizer import freeze_by_name, make_optimizer, make_schedule
from jaxrl_agent.learner.prepare import TrainBatch, compute_advantages
from jaxrl_agent.learner.sharding import LOGICAL_AXIS_RULES, param_shardings, shard_batch
from jaxrl_agent.learner.train_state import (
    TrainState,
    abstract_state,
    init_train_state,
    state_shardings,
)
from jaxrl_agent.learner.train_step import make_compute_advantages, make_train_step

__all__ = [
    "LOGICAL_AXIS_RULES",
    "MESH_AXES",
    "CheckpointError",
    "Checkpointer",
    "KLController",
    "KLControllerState",
    "LearnerHParams",
    "TrainBatch",
    "TrainState",
    "abstract_like",
    "abstract_state",
    "adaptive_kl_controller",
    "check_batch_divisible",
    "compute_advantages",
    "fixed_kl_controller",
    "freeze_by_name",
    "init_train_state",
    "is_main_process",
    "make_compute_advantages",
    "make_mesh",
    "make_optimizer",
    "make_schedule",
    "make_train_step",
    "maybe_initialize_distributed",
    "param_shardings",
    "shard_batch",
    "single_device_mesh",
    "state_shardings",
]
