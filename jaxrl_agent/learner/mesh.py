"""Device mesh with the axes ('data', 'fsdp', 'tensor').

`data` replicates parameters and splits the batch; `fsdp` splits the batch and
shards parameters (ZeRO-3 style: parameters are all-gathered per use);
`tensor` splits matmuls over heads / MLP width / vocabulary (Megatron style).

Axis types: jax >= 0.7 makes `jax.make_mesh` axes `Explicit` by default, where
every intermediate array carries its sharding in its type and operations
whose sharding is ambiguous must be annotated. The model code annotates only
parameters (through logical axis names) and the batch, so we pass
`AxisType.Auto` deliberately: the jitted step fixes input/output shardings and
XLA's sharding propagation (Shardy/GSPMD) places the intermediates. This works
unchanged on jax 0.10 and 0.11.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import numpy as np

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")  # mesh axes that split the batch


def make_mesh(
    shape: Sequence[int] = (-1, 1, 1),
    *,
    devices: Sequence[jax.Device] | None = None,
    axis_types: jax.sharding.AxisType = jax.sharding.AxisType.Auto,
) -> jax.sharding.Mesh:
    """Builds a ('data', 'fsdp', 'tensor') mesh.

    Args:
      shape: three ints (data, fsdp, tensor); at most one may be -1, meaning
        "all remaining devices".
      devices: devices to use (default: all of `jax.devices()`).
      axis_types: the type of all three axes (default Auto, see module doc).

    Returns:
      A `jax.sharding.Mesh` with axis names MESH_AXES.

    Raises:
      ValueError: `mesh_shape` is not three ints, or its product differs from
        the number of devices (the message gives both numbers).
    """
    devices = list(jax.devices() if devices is None else devices)
    shape = tuple(int(s) for s in shape)
    if len(shape) != len(MESH_AXES):
        raise ValueError(
            f"mesh_shape: expected 3 ints for axes {MESH_AXES}, got {shape}"
        )
    if shape.count(-1) > 1 or any(s == 0 or s < -1 for s in shape):
        raise ValueError(
            f"mesh_shape: expected positive ints with at most one -1, got {shape}"
        )
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if len(devices) % known:
            raise ValueError(
                f"mesh_shape: {shape} cannot fill {len(devices)} devices "
                f"(product of the known axes is {known})"
            )
        shape = tuple(len(devices) // known if s == -1 else s for s in shape)
    if math.prod(shape) != len(devices):
        raise ValueError(
            f"mesh_shape: product of {shape} is {math.prod(shape)}, but there "
            f"are {len(devices)} devices; expected the product to equal the "
            "number of devices"
        )
    return jax.make_mesh(
        shape, MESH_AXES, axis_types=(axis_types,) * len(MESH_AXES), devices=devices
    )


def single_device_mesh(device: jax.Device | None = None) -> jax.sharding.Mesh:
    """A (1, 1, 1) mesh on one device (default: the first one)."""
    device = jax.devices()[0] if device is None else device
    return make_mesh((1, 1, 1), devices=[device])


def data_parallel_size(mesh: jax.sharding.Mesh) -> int:
    """Number of batch shards: size of 'data' times size of 'fsdp'."""
    return int(np.prod([mesh.shape[a] for a in BATCH_AXES]))


def check_batch_divisible(batch_size: int, mesh: jax.sharding.Mesh, *, name: str = "batch_size") -> None:
    """Raises ValueError unless `batch_size` splits evenly over the batch axes.

    Raises:
      ValueError: naming `name`, the batch size and the data-parallel size.
    """
    dp = data_parallel_size(mesh)
    if batch_size % dp:
        raise ValueError(
            f"{name}: {batch_size} is not divisible by the data-parallel size "
            f"{dp} (mesh data={mesh.shape['data']} x fsdp={mesh.shape['fsdp']})"
        )
