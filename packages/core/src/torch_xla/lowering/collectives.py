"""Cross-replica collectives as JAX: the lowerings of `xm.all_reduce` and its siblings.

They are not ATen ops, so they are not in the registry: `torch_xla.core.xla_model`
records them on XLA tensors directly. Each function runs inside the graph's
replicated program (`shard_map` over every device of the job, axis `AXIS`), one
call per replica; its arrays are that replica's values.

`groups` (replica groups) follow XLA: a list of equal-sized lists of replica
ordinals that together name every replica once; None means one group of all.
Without groups the native collective is used; with groups the values are
gathered and each replica combines its own group's members.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

AXIS = "replica"

REDUCE_TYPES = ("sum", "mul", "and", "or", "min", "max")
Groups = tuple[tuple[int, ...], ...] | None


def collective(fn: Callable) -> Callable:
    """Mark `fn` as a collective: graphs holding it compile as one program per replica."""
    fn.collective = True
    return fn


def check_groups(groups: Sequence[Sequence[int]] | None, world: int) -> Groups:
    """`groups` as a hashable tuple, after checking it names every replica once."""
    if groups is None:
        return None
    groups = tuple(tuple(int(r) for r in g) for g in groups)
    members = sorted(r for g in groups for r in g)
    if members != list(range(world)) or len({len(g) for g in groups}) != 1:
        raise ValueError(
            f"Replica groups {[list(g) for g in groups]} must be equal-sized lists that together "
            f"name every replica 0..{world - 1} exactly once (world size {world})."
        )
    return groups


def group_size(groups: Groups, world: int) -> int:
    return world if groups is None else len(groups[0])


def _tables(groups: Groups, world: int) -> tuple[np.ndarray, np.ndarray]:
    """members[r]: the replicas of r's group in group order; position[r]: r's index in it."""
    groups = groups or (tuple(range(world)),)
    members = np.zeros((world, len(groups[0])), np.int32)
    position = np.zeros(world, np.int32)
    for g in groups:
        for i, r in enumerate(g):
            members[r] = g
            position[r] = i
    return members, position


def _group_values(x: jax.Array, groups: Groups, world: int) -> jax.Array:
    """The values of this replica's group, stacked in group order."""
    members, _ = _tables(groups, world)
    gathered = lax.all_gather(x, AXIS)  # (world, *x.shape)
    return jnp.take(gathered, jnp.asarray(members)[lax.axis_index(AXIS)], axis=0)


def _position(groups: Groups, world: int) -> jax.Array:
    """This replica's index within its group."""
    _, position = _tables(groups, world)
    return jnp.asarray(position)[lax.axis_index(AXIS)]


def _identity(reduce_type: str, dtype) -> object:
    if reduce_type in ("sum", "or"):
        return jnp.zeros((), dtype)
    if reduce_type == "mul":
        return jnp.ones((), dtype)
    if reduce_type == "and":
        return jnp.array(True) if dtype == jnp.bool_ else jnp.array(-1, dtype)
    big = jnp.finfo(dtype).max if jnp.issubdtype(dtype, jnp.inexact) else None
    if big is None:
        big = True if dtype == jnp.bool_ else jnp.iinfo(dtype).max
    if reduce_type == "min":
        return jnp.array(big, dtype)
    small = jnp.finfo(dtype).min if jnp.issubdtype(dtype, jnp.inexact) else None
    if small is None:
        small = False if dtype == jnp.bool_ else jnp.iinfo(dtype).min
    return jnp.array(small, dtype)


_COMBINE = {
    "sum": jnp.add,
    "mul": jnp.multiply,
    "and": lambda a, b: jnp.logical_and(a, b) if a.dtype == jnp.bool_ else a & b,
    "or": lambda a, b: jnp.logical_or(a, b) if a.dtype == jnp.bool_ else a | b,
    "min": jnp.minimum,
    "max": jnp.maximum,
}


def _reduce(x: jax.Array, reduce_type: str, groups: Groups, world: int) -> jax.Array:
    if groups is None and x.dtype != jnp.bool_:
        native = {"sum": lax.psum, "min": lax.pmin, "max": lax.pmax}.get(reduce_type)
        if native is not None:
            return native(x, AXIS)
    values = _group_values(x, groups, world)
    return functools.reduce(_COMBINE[reduce_type], [values[i] for i in range(values.shape[0])])


def _scaled(x: jax.Array, scale: float) -> jax.Array:
    if scale == 1.0:
        return x
    return (x * scale).astype(x.dtype)


@collective
def all_reduce(*xs, reduce_type: str, scale: float, groups: Groups, world: int):
    return tuple(_scaled(_reduce(x, reduce_type, groups, world), scale) for x in xs)


@collective
def all_gather(x, *, dim: int, groups: Groups, world: int):
    if groups is None:
        return lax.all_gather(x, AXIS, axis=dim, tiled=True)
    values = _group_values(x, groups, world)
    return jnp.concatenate([values[i] for i in range(values.shape[0])], axis=dim)


@collective
def reduce_scatter(x, *, reduce_type: str, scale: float, dim: int, groups: Groups, world: int):
    count = group_size(groups, world)
    if groups is None and reduce_type == "sum" and x.dtype != jnp.bool_:
        return _scaled(lax.psum_scatter(x, AXIS, scatter_dimension=dim, tiled=True), scale)
    full = _reduce(x, reduce_type, groups, world)
    chunk = x.shape[dim] // count
    position = _position(groups, world)
    return _scaled(lax.dynamic_slice_in_dim(full, position * chunk, chunk, axis=dim), scale)


@collective
def all_to_all(x, *, split_dim: int, concat_dim: int, groups: Groups, world: int):
    count = group_size(groups, world)
    if groups is None:
        return lax.all_to_all(x, AXIS, split_dim, concat_dim, tiled=True)
    values, position = _group_values(x, groups, world), _position(groups, world)
    chunk = x.shape[split_dim] // count
    pieces = [
        lax.dynamic_slice_in_dim(values[j], position * chunk, chunk, axis=split_dim)
        for j in range(count)
    ]
    return jnp.concatenate(pieces, axis=concat_dim)


@collective
def collective_permute(x, *, pairs: tuple[tuple[int, int], ...]):
    return lax.ppermute(x, AXIS, perm=pairs)
