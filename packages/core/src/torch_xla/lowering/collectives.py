"""Cross-replica collectives as JAX: the lowerings of `xm.all_reduce` and its siblings.

They are not ATen ops, so they are not in the registry: `torch_xla.core.xla_model`
checks its arguments with the rules below and records them on XLA tensors directly, as
`torch_xla.lazy.functional_collectives` does for torch's `_c10d_functional` ops.
Each function runs inside the graph's replicated program (`shard_map` over every
device of the job, axis `AXIS`), one call per replica; its arrays are that replica's
values.

`groups` (replica groups) follow XLA: a list of equal-sized lists of replica
ordinals that together name every replica once; None means one group of all.
They become the `replica_groups` of XLA's own collectives (all-reduce, all-gather,
reduce-scatter, all-to-all); reductions XLA's all-reduce cannot express through
jax (product, and/or, booleans) gather the group's values and combine them.

Each rule takes `world`, the number of replicas the recording named: the job's
replicas, or more when `groups` name ranks beyond them (PyTorch/XLA's tests mock a
bigger `torch.distributed` world to read the HLO text). Such a graph can be shown as
text (lowered over an abstract mesh of `world` replicas) but not run: the lowering
for the job's real mesh raises `ReplicaWorldError`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src.interpreters import mlir  # the helpers jax's own collective lowerings use
from jax._src.lax import parallel as jax_parallel  # replica groups of the axis context
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import hlo
from jax.extend.core import Primitive

AXIS = "replica"

REDUCE_TYPES = ("sum", "mul", "and", "or", "min", "max")
# the reduce types by torch.distributed's names for them (its ReduceOp, functional
# collectives' strings); torch's "avg" is a sum scaled by 1 / group size
REDUCE_TYPE_OF_TORCH_OP = {"sum": "sum", "product": "mul", "band": "and", "bor": "or",
                           "min": "min", "max": "max"}
TORCH_OP_OF_REDUCE_TYPE = {v: k for k, v in REDUCE_TYPE_OF_TORCH_OP.items()}
Groups = tuple[tuple[int, ...], ...] | None


class ReplicaWorldError(RuntimeError):
    """A graph's collective names more replicas than the job has (it can only be shown)."""


_SHOWING = contextvars.ContextVar("showing", default=False)


@contextlib.contextmanager
def showing() -> Iterator[None]:
    """Lower collectives for their HLO text, not to run (see `all_gather_coalesced`)."""
    token = _SHOWING.set(True)
    try:
        yield
    finally:
        _SHOWING.reset(token)


def collective(fn: Callable) -> Callable:
    """Mark `fn` as a collective: graphs holding it compile as one program per replica."""
    fn.collective = True
    return fn


def always_record() -> bool:
    """XLA_ALWAYS_ALLREDUCE=1: a world of one replica records its collectives too (read at
    each call, as PyTorch/XLA does), so they appear in the HLO and run as XLA ops."""
    return os.environ.get("XLA_ALWAYS_ALLREDUCE", "0").lower() not in ("", "0", "false")


def records(world: int) -> bool:
    """Whether a collective over `world` replicas is recorded; else it is a plain op."""
    return world > 1 or always_record()


def check_groups(groups: Sequence[Sequence[int]] | None, world: int) -> Groups:
    """`groups` as a hashable tuple, after checking they are equal-sized and name replicas
    0..n-1 once each, n at least `world` (None or `[]`: one group of every replica, as in
    PyTorch/XLA). More than `world` replicas can be recorded and shown, not run."""
    if not groups:
        return None
    groups = tuple(tuple(int(r) for r in g) for g in groups)
    members = sorted(r for g in groups for r in g)
    if (members != list(range(len(members))) or len(members) < world
            or len({len(g) for g in groups}) != 1):
        raise ValueError(
            f"Replica groups {[list(g) for g in groups]} must be equal-sized lists that together "
            f"name every replica 0..n-1 exactly once, n at least the world size {world} (more "
            "only to show the graph's HLO text: such a graph cannot run)."
        )
    return groups


def span(groups: Groups, world: int) -> int:
    """The replicas a collective over `groups` names: the job's `world`, or more."""
    return world if groups is None else max(world, sum(len(g) for g in groups))


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
    """collective_permute's `[src, dst]` pairs as a tuple, after checking them (replicas
    beyond `world` can be recorded and shown, not run, as with `check_groups`)."""
    pairs = tuple((int(s), int(d)) for s, d in pairs)
    sources, targets = [s for s, _ in pairs], [d for _, d in pairs]
    if (len(set(sources)) != len(sources) or len(set(targets)) != len(targets)
            or not all(r >= 0 for r in sources + targets)):
        raise ValueError(f"collective_permute: pairs {[list(p) for p in pairs]} must name "
                         f"replicas 0..{world - 1}, each at most once as source and as target.")
    return pairs


def pairs_span(pairs: tuple[tuple[int, int], ...], world: int) -> int:
    return max([world] + [r + 1 for pair in pairs for r in pair])


def resized(shape: Sequence[int], dim: int, factor: int = 1, divisor: int = 1) -> tuple:
    """`shape` with dimension `dim` multiplied by `factor` and divided by `divisor`."""
    out = list(shape)
    out[dim] = out[dim] * factor // divisor
    return tuple(out)


# --- inside the replicated program ------------------------------------------------------


def _check_world(world: int, op: str) -> None:
    """Raise when the program runs on fewer replicas than the collective names."""
    size = lax.axis_size(AXIS)
    if world > size:
        raise ReplicaWorldError(
            f"{op} was recorded over {world} replicas (its replica groups or pairs name ranks "
            f"up to {world - 1}), but this job has {size}. Such a graph can be shown "
            "(torch_xla._XLAC._get_xla_tensors_hlo) but not run: run it in a job of "
            f"{world} replicas, or name only replicas 0..{size - 1}."
        )


def _index_groups(groups: Groups) -> list[list[int]] | None:
    return None if groups is None else [list(g) for g in groups]


def _position(groups: Groups, world: int) -> jax.Array:
    """This replica's index within its group."""
    position = np.zeros(world, np.int32)
    for g in groups or (tuple(range(world)),):
        for i, r in enumerate(g):
            position[r] = i
    return jnp.asarray(position)[lax.axis_index(AXIS)]


_COMBINE = {
    "sum": jnp.add,
    "mul": jnp.multiply,
    "and": lambda a, b: jnp.logical_and(a, b) if a.dtype == jnp.bool_ else a & b,
    "or": lambda a, b: jnp.logical_or(a, b) if a.dtype == jnp.bool_ else a | b,
    "min": jnp.minimum,
    "max": jnp.maximum,
}
_NATIVE = {"sum": lax.psum, "min": lax.pmin, "max": lax.pmax}


def _reduce(x: jax.Array, reduce_type: str, groups: Groups) -> jax.Array:
    """XLA's all-reduce where jax has it; else the group's values gathered and combined."""
    native = _NATIVE.get(reduce_type)
    if native is not None and x.dtype != jnp.bool_:
        return native(x, AXIS, axis_index_groups=_index_groups(groups))
    values = lax.all_gather(x, AXIS, axis_index_groups=_index_groups(groups))
    return functools.reduce(_COMBINE[reduce_type], [values[i] for i in range(values.shape[0])])


def scaled(x: jax.Array, scale: float) -> jax.Array:
    if scale == 1.0:
        return x
    return (x * scale).astype(x.dtype)


@collective
def all_reduce(*xs, reduce_type: str, scale: float, groups: Groups, world: int):
    _check_world(world, "all_reduce")
    return tuple(scaled(_reduce(x, reduce_type, groups), scale) for x in xs)


@collective
def all_gather(x, *, dim: int, groups: Groups, world: int):
    _check_world(world, "all_gather")
    return lax.all_gather(x, AXIS, axis=dim, tiled=True, axis_index_groups=_index_groups(groups))


@collective
def all_gather_coalesced(*xs, dim: int, groups: Groups, world: int):
    """Several tensors all-gathered together (PyTorch/XLA's `xm.all_gather` of a list).

    The text shows XLA's one variadic all-gather, as PyTorch/XLA records it; the program
    that runs has one all-gather per tensor, because XLA (jaxlib 0.10) cannot export a
    variadic all-gather from a Shardy manual computation ("Sharding is tuple-shaped but
    validation shape is not"). The results are the same."""
    _check_world(world, "all_gather")
    if not _SHOWING.get():
        return tuple(all_gather(x, dim=dim, groups=groups, world=world) for x in xs)
    count = group_size(groups, lax.axis_size(AXIS))
    return tuple(_all_gather_coalesced_p.bind(*xs, dim=dim, groups=groups, count=count))


@collective
def reduce_scatter(x, *, reduce_type: str, scale: float, dim: int, groups: Groups, world: int):
    _check_world(world, "reduce_scatter")
    if reduce_type == "sum" and x.dtype != jnp.bool_:
        return scaled(lax.psum_scatter(x, AXIS, scatter_dimension=dim, tiled=True,
                                        axis_index_groups=_index_groups(groups)), scale)
    count = group_size(groups, world)
    full = _reduce(x, reduce_type, groups)
    chunk = x.shape[dim] // count
    position = _position(groups, world)
    return scaled(lax.dynamic_slice_in_dim(full, position * chunk, chunk, axis=dim), scale)


@collective
def all_to_all(x, *, split_dim: int, concat_dim: int, groups: Groups, world: int):
    _check_world(world, "all_to_all")
    return lax.all_to_all(x, AXIS, split_dim, concat_dim, tiled=True,
                          axis_index_groups=_index_groups(groups))


@collective
def broadcast(x, *, root: int, groups: Groups, world: int):
    """Every replica gets the value of the replica at position `root` of its group: the
    others' values are zeroed and XLA's all-reduce adds the group's bit patterns, as
    unsigned integers of the dtype's width, so the root's values arrive exactly (NaNs
    and -0.0 included)."""
    _check_world(world, "broadcast")
    mine = _position(groups, world) == root
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        parts = [broadcast(part, root=root, groups=groups, world=world)
                 for part in (jnp.real(x), jnp.imag(x))]
        return lax.complex(*parts).astype(x.dtype)
    bits = jnp.dtype(f"uint{max(8, x.dtype.itemsize * 8)}")
    word = x.astype(jnp.uint8) if x.dtype == jnp.bool_ else lax.bitcast_convert_type(x, bits)
    total = lax.psum(jnp.where(mine, word, jnp.zeros_like(word)), AXIS,
                     axis_index_groups=_index_groups(groups))
    return total.astype(jnp.bool_) if x.dtype == jnp.bool_ else lax.bitcast_convert_type(
        total, x.dtype)


@collective
def collective_permute(x, *, pairs: tuple[tuple[int, int], ...], world: int = 1):
    _check_world(world, "collective_permute")
    return lax.ppermute(x, AXIS, perm=pairs)


# --- one all-gather of several operands (jax's all_gather makes one op per array) --------

_all_gather_coalesced_p = Primitive("xla_all_gather_coalesced")
_all_gather_coalesced_p.multiple_results = True


@_all_gather_coalesced_p.def_abstract_eval
def _all_gather_coalesced_shapes(*avals, dim: int, groups: Groups, count: int):
    return [a.update(shape=resized(a.shape, dim, factor=count)) for a in avals]


def _all_gather_coalesced_lowering(ctx, *xs, dim: int, groups: Groups, count: int):
    # As jax lowers its own all_gather inside shard_map: global device ids, a channel.
    replica_groups = jax_parallel._replica_groups(ctx.module_context.axis_context, AXIS,
                                                  _index_groups(groups))
    op = hlo.AllGatherOp(
        [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out], list(xs),
        all_gather_dim=mlir.i64_attr(dim),
        replica_groups=jax_parallel._replica_groups_hlo(replica_groups),
        channel_handle=hlo.ChannelHandle.get(mlir.COLLECTIVE_CHANNEL_ID,
                                             mlir.DEVICE_TO_DEVICE_TYPE),
        use_global_device_ids=ir.BoolAttr.get(True),
    )
    return op.results


mlir.register_lowering(_all_gather_coalesced_p, _all_gather_coalesced_lowering)
