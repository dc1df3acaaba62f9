"""Logical-axis rule table and shardings of parameters, optimizer state, batch.

The model names the axes of each parameter with the logical names of
`jaxrl_agent.models.axes`; `LOGICAL_AXIS_RULES` maps each to mesh axes. A
parameter dimension whose size does not divide by its mesh axes is left
replicated on that dimension (e.g. a tiny vocabulary on a large tensor axis)
rather than failing; `param_shardings` reports it through `fallbacks`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import jax
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxrl_agent.models import axes
from jaxrl_agent.learner.mesh import BATCH_AXES, check_batch_divisible

# One rule table: logical name -> mesh axis, tuple of mesh axes, or None (replicated).
LOGICAL_AXIS_RULES: dict[str, str | tuple[str, ...] | None] = {
    axes.BATCH: BATCH_AXES,
    axes.LENGTH: None,
    axes.EMBED: "fsdp",
    axes.VOCAB: "tensor",
    axes.MLP: "tensor",
    axes.HEADS: "tensor",
    axes.KV_HEADS: "tensor",
    axes.HEAD_DIM: None,
    axes.LAYERS: None,
}


def _mesh_axes_of(entry) -> tuple[str, ...]:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def logical_to_mesh_spec(
    logical: P | Sequence[str | None],
    rules: Mapping[str, Any] = LOGICAL_AXIS_RULES,
    *,
    shape: Sequence[int] | None = None,
    mesh: jax.sharding.Mesh | None = None,
) -> P:
    """Maps a PartitionSpec of logical names to one of mesh axes.

    Args:
      logical: one logical name (or None) per array dimension.
      rules: logical name -> mesh axis / tuple of mesh axes / None.
      shape, mesh: if both given, a dimension not divisible by the product of
        its mesh-axis sizes is replicated instead; a mesh axis is used at most
        once per array (a later dimension asking for a used axis is replicated).

    Raises:
      ValueError: a logical name missing from `rules` (lists the known names).
    """
    out, used = [], set()
    for dim, name in enumerate(tuple(logical)):
        if name is None:
            out.append(None)
            continue
        names = _mesh_axes_of(name) if not isinstance(name, str) else (name,)
        mesh_axes: list[str] = []
        for n in names:
            if n not in rules:
                raise ValueError(
                    f"logical axis {n!r} has no sharding rule; known: {sorted(rules)}"
                )
            mesh_axes.extend(_mesh_axes_of(rules[n]))
        mesh_axes = [a for a in mesh_axes if a not in used]
        if shape is not None and mesh is not None and mesh_axes:
            size = math.prod(mesh.shape[a] for a in mesh_axes)
            if shape[dim] % size:
                mesh_axes = []
        used.update(mesh_axes)
        out.append(None if not mesh_axes else mesh_axes[0] if len(mesh_axes) == 1 else tuple(mesh_axes))
    return P(*out)


def param_shardings(
    params_shapes: Any,
    logical_axes: Any,
    mesh: jax.sharding.Mesh,
    rules: Mapping[str, Any] = LOGICAL_AXIS_RULES,
) -> Any:
    """NamedShardings for a parameter tree.

    Args:
      params_shapes: parameter tree (arrays or jax.ShapeDtypeStruct).
      logical_axes: same tree with a PartitionSpec of logical names per leaf
        (e.g. `jaxrl_agent.models.transformer.param_logical_axes(config)`).
      mesh: the device mesh.
      rules: the logical -> mesh rule table.
    """
    is_spec = lambda x: isinstance(x, P)
    return jax.tree.map(
        lambda spec, x: NamedSharding(
            mesh, logical_to_mesh_spec(spec, rules, shape=x.shape, mesh=mesh)
        ),
        logical_axes,
        params_shapes,
        is_leaf=is_spec,
    )


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
    """A fully replicated sharding on `mesh`."""
    return NamedSharding(mesh, P())


def opt_state_shardings(
    optimizer: optax.GradientTransformation,
    opt_state_shapes: Any,
    params_shardings_tree: Any,
    mesh: jax.sharding.Mesh,
) -> Any:
    """Shardings of an optax state: param-shaped leaves follow their parameter.

    Uses `optax.tree_map_params` so that moments (mu, nu, ...) get their
    parameter's sharding and everything else (counts, schedule state) is
    replicated.
    """
    return optax.tree_map_params(
        optimizer,
        lambda _, sharding: sharding,
        opt_state_shapes,
        params_shardings_tree,
        transform_non_params=lambda _: replicated(mesh),
        is_leaf=lambda x: isinstance(x, NamedSharding),
    )


def batch_sharding(mesh: jax.sharding.Mesh, ndim: int) -> NamedSharding:
    """Sharding of a batch array [B, ...]: B split over ('data', 'fsdp')."""
    return NamedSharding(mesh, P(BATCH_AXES, *([None] * (ndim - 1))))


def batch_shardings(batch: Any, mesh: jax.sharding.Mesh) -> Any:
    """Tree of `batch_sharding` for every array leaf of `batch` (None stays None)."""
    return jax.tree.map(lambda x: batch_sharding(mesh, len(x.shape)), batch)


def shard_batch(batch: Any, mesh: jax.sharding.Mesh) -> Any:
    """Places a host batch on the mesh, rows split over ('data', 'fsdp').

    Raises:
      ValueError: the batch size does not divide by the data-parallel size.
    """
    leaves = jax.tree.leaves(batch)
    if leaves:
        check_batch_divisible(int(leaves[0].shape[0]), mesh)
    return jax.device_put(batch, batch_shardings(batch, mesh))
