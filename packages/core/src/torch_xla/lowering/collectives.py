"""Cross-replica collectives as JAX: the lowerings of `xm.all_reduce` and its siblings.

They are not ATen ops, so they are not in the registry: `torch_xla.core.xla_model`
checks its arguments with the rules below and records them on XLA tensors directly.
Each function runs inside the graph's replicated program (`shard_map` over every
device of the job, axis `AXIS`), one call per replica; its arrays are that replica's
values.

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
    """`groups` as a hashable tuple, after checking it names every replica once (None or
    `[]`: one group of every replica, as in PyTorch/XLA)."""
    if not groups:
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


# --- argument rules and output shapes (checked by xm before recording) ----------------


def check_reduce_type(reduce_type: str) -> None:
    if reduce_type not in REDUCE_TYPES:
        raise ValueError(
            f"Unknown reduce_type {reduce_type!r}; use one of xm.REDUCE_SUM, REDUCE_MUL, "
            "REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX."
        )


def check_dim(shape: Sequence[int], dim: int) -> int:
    """`dim` of a tensor of `shape`, made non-negative."""
    rank = len(shape)
    if not -rank <= dim < max(rank, 1):
        raise IndexError(f"dimension {dim} is out of range for a {rank}-d tensor")
    return dim % max(rank, 1)


def check_divisible(shape: Sequence[int], dim: int, count: int, op: str) -> None:
    if shape[dim] % count:
        raise ValueError(
            f"{op}: dimension {dim} of size {shape[dim]} does not split into {count} "
            "equal parts (one per replica of the group)."
        )


def check_parts(parts: int, groups: Groups, world: int, op: str, name: str) -> int:
    """The group size, after checking the caller's `name`=`parts` equals it."""
    count = group_size(groups, world)
    if parts != count:
        raise ValueError(f"{op}: {name}={parts}, but a group has {count} replicas; they must "
                         "be equal.")
    return count


def check_pairs(pairs: Sequence[Sequence[int]], world: int) -> tuple[tuple[int, int], ...]:
    """collective_permute's `[src, dst]` pairs as a tuple, after checking them."""
    pairs = tuple((int(s), int(d)) for s, d in pairs)
    sources, targets = [s for s, _ in pairs], [d for _, d in pairs]
    if (len(set(sources)) != len(sources) or len(set(targets)) != len(targets)
            or not all(0 <= r < world for r in sources + targets)):
        raise ValueError(f"collective_permute: pairs {[list(p) for p in pairs]} must name "
                         f"replicas 0..{world - 1}, each at most once as source and as target.")
    return pairs


def resized(shape: Sequence[int], dim: int, factor: int = 1, divisor: int = 1) -> tuple:
    """`shape` with dimension `dim` multiplied by `factor` and divided by `divisor`."""
    out = list(shape)
    out[dim] = out[dim] * factor // divisor
    return tuple(out)


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
