"""Multi-host start-up: jax.distributed.initialize when a cluster is detected.

Call `maybe_initialize_distributed()` before any other JAX call. Detected
environments: an explicit coordinator (JAX_COORDINATOR_ADDRESS with
JAX_NUM_PROCESSES and JAX_PROCESS_ID), SLURM with more than one task, and
Cloud TPU pod slices (TPU_WORKER_HOSTNAMES listing more than one worker);
for the last two JAX's own cluster detection fills in the arguments.
"""

from __future__ import annotations

import os
from typing import Mapping

import jax


def detect_cluster(env: Mapping[str, str] | None = None) -> str | None:
    """Names the multi-host environment found in `env`, or None for one host.

    Returns one of 'explicit', 'slurm', 'tpu_pod', or None.
    """
    env = os.environ if env is None else env
    if env.get("JAX_COORDINATOR_ADDRESS"):
        return "explicit"
    if int(env.get("SLURM_NTASKS", "1") or 1) > 1 and "SLURM_JOB_ID" in env:
        return "slurm"
    hosts = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
    if len(hosts) > 1:
        return "tpu_pod"
    return None


def maybe_initialize_distributed(env: Mapping[str, str] | None = None) -> bool:
    """Calls jax.distributed.initialize() if a multi-host cluster is detected.

    Returns:
      True if initialize was called, False on a single host.

    Raises:
      ValueError: JAX_COORDINATOR_ADDRESS is set without JAX_NUM_PROCESSES and
        JAX_PROCESS_ID (names the missing variables).
    """
    env = os.environ if env is None else env
    kind = detect_cluster(env)
    if kind is None:
        return False
    if kind == "explicit":
        missing = [k for k in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID") if k not in env]
        if missing:
            raise ValueError(
                f"JAX_COORDINATOR_ADDRESS is set but {missing} are not; expected "
                "all three for an explicit multi-host start"
            )
        jax.distributed.initialize(
            coordinator_address=env["JAX_COORDINATOR_ADDRESS"],
            num_processes=int(env["JAX_NUM_PROCESSES"]),
            process_id=int(env["JAX_PROCESS_ID"]),
        )
    else:
        jax.distributed.initialize()
    return True


def is_main_process() -> bool:
    """True on process 0 only: the one that writes logs and metrics."""
    return jax.process_index() == 0
