"""torch's functional collectives (`torch.ops._c10d_functional`) on XLA tensors.

They are what `torch.distributed._functional_collectives` calls, what dynamo puts in a
graph for `dist.all_reduce` & co, and what `xm.all_reduce`/`all_gather`/`reduce_scatter`
emit while dynamo traces them. On XLA tensors each records the same collective node as
xm's function (`lowering/collectives.py`), so a graph compiled from them is one
replicated program and "waiting" on a result is a no-op.

The group: "" (and "default", which PyTorch/XLA's tests pass) is every replica of the
job. A name registered in `torch.distributed` (or the group object torch 2.13 may pass
instead) must be a group of the `xla` backend; its replica groups are the ones
`dist.new_group` gave it (every process takes part, each in its own group, as
PyTorch/XLA runs them). A name that no group is registered under means every replica,
as in PyTorch/XLA, which reads no group name.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from torch_xla.lazy import nodes, replicas
from torch_xla.lazy.dispatch import special
from torch_xla.lazy.tensor import XLATensor
from torch_xla.lowering import collectives

_OPS = torch.ops._c10d_functional
_EVERY_REPLICA = ("", "default")


def _group(func: Any, group: Any) -> tuple[collectives.Groups, int]:
    """The replica groups `group` (a name or a process group) stands for, and the number
    of replicas they span."""
    world = replicas.world_size()
    groups = None
    process_group = _process_group(group)
    if process_group is not None:
        groups = collectives.check_groups(_xla_backend(func, group, process_group)
                                          .replica_groups(), world)
    return groups, collectives.span(groups, world)


def _process_group(group: Any) -> Any:
    """The process group `group` is, or None for every replica (a name no group is
    registered under, "" and "default")."""
    if not isinstance(group, str):
        return group
    if group in _EVERY_REPLICA or not dist.is_available() or not dist.is_initialized():
        return None
    try:
        return dist.distributed_c10d._resolve_process_group(group)
    except (ValueError, RuntimeError):
        return None


def _xla_backend(func: Any, group: Any, process_group: Any) -> Any:
    backend = process_group  # the xla backend's groups are its own process groups
    if not hasattr(backend, "replica_groups"):
        try:
            backend = process_group._get_backend(torch.device("xla"))
        except RuntimeError:
            backend = None
    if not hasattr(backend, "replica_groups"):
        raise NotImplementedError(
            f"{func} over process group {group!r}: XLA tensors take part in collectives of "
            "the 'xla' backend only; create the group with dist.init_process_group('xla', "
            "init_method='xla://') or dist.new_group(ranks) after it."
        )
    return backend


def _reduce_type(reduce_op: str) -> str:
    """xm's name of torch's reduce op `reduce_op` ("avg": a sum, scaled by `_scale`)."""
    op = reduce_op.lower()
    found = collectives.REDUCE_TYPE_OF_TORCH_OP.get("sum" if op == "avg" else op)
    if found is None:
        raise ValueError(f"Reduce op {reduce_op!r} is not supported on XLA tensors; use one "
                         f"of {sorted([*collectives.REDUCE_TYPE_OF_TORCH_OP, 'avg'])}.")
    return found


def _scale(reduce_op: str, count: int) -> float:
    return 1.0 / count if reduce_op.lower() == "avg" else 1.0


def _copy(t: XLATensor) -> XLATensor:
    return XLATensor(*t.value)


def _check_count(func: Any, group_size: int, groups: collectives.Groups, world: int) -> int:
    count = collectives.group_size(groups, world)
    if group_size != count:
        raise ValueError(f"{func}: group_size={group_size}, but the group has {count} "
                         "replicas.")
    return count


def _record(rule: Any, t: XLATensor, static: dict, shape: tuple) -> XLATensor:
    (result,) = nodes.custom(rule, f"xla::{rule.__name__}", [t], static, [(shape, t.dtype)])
    return result


def _all_reduce(func: Any, t: XLATensor, reduce_op: str, group: Any) -> XLATensor:
    reduce_type = _reduce_type(reduce_op)
    groups, world = _group(func, group)
    if not collectives.records(world):
        return _copy(t)
    static = dict(reduce_type=reduce_type, groups=groups, world=world,
                  scale=_scale(reduce_op, collectives.group_size(groups, world)))
    return _record(collectives.all_reduce, t, static, tuple(t.shape))


def _all_gather(func: Any, t: XLATensor, group_size: int, group: Any) -> XLATensor:
    groups, world = _group(func, group)
    count = _check_count(func, group_size, groups, world)
    if t.dim() == 0:
        raise ValueError(f"{func} gathers along dimension 0: give it a tensor of at least "
                         "one dimension.")
    if not collectives.records(world):
        return _copy(t)
    return _record(collectives.all_gather, t, dict(dim=0, groups=groups, world=world),
                   collectives.resized(t.shape, 0, factor=count))


def _reduce_scatter(func: Any, t: XLATensor, reduce_op: str, group_size: int,
                    group: Any) -> XLATensor:
    reduce_type = _reduce_type(reduce_op)
    groups, world = _group(func, group)
    count = _check_count(func, group_size, groups, world)
    if t.dim() == 0:
        raise ValueError(f"{func} scatters along dimension 0: give it a tensor of at least "
                         "one dimension.")
    collectives.check_divisible(t.shape, 0, count, "reduce_scatter_tensor")
    if not collectives.records(world):
        return _copy(t)
    static = dict(reduce_type=reduce_type, scale=_scale(reduce_op, count), dim=0,
                  groups=groups, world=world)
    return _record(collectives.reduce_scatter, t, static,
                   collectives.resized(t.shape, 0, divisor=count))


@special(_OPS.all_reduce.default)
def _all_reduce_rule(func, args, kwargs):
    return _all_reduce(func, *args, **kwargs)


@special(_OPS.all_reduce_coalesced.default)
def _all_reduce_coalesced_rule(func, args, kwargs):
    inputs, reduce_op, group = args
    return [_all_reduce(func, t, reduce_op, group) for t in inputs]


@special(_OPS.all_gather_into_tensor.default)
def _all_gather_rule(func, args, kwargs):
    return _all_gather(func, *args, **kwargs)


@special(_OPS.all_gather_into_tensor_coalesced.default)
def _all_gather_coalesced_rule(func, args, kwargs):
    inputs, group_size, group = args
    return [_all_gather(func, t, group_size, group) for t in inputs]


@special(_OPS.reduce_scatter_tensor.default)
def _reduce_scatter_rule(func, args, kwargs):
    return _reduce_scatter(func, *args, **kwargs)


@special(_OPS.reduce_scatter_tensor_coalesced.default)
def _reduce_scatter_coalesced_rule(func, args, kwargs):
    inputs, reduce_op, group_size, group = args
    return [_reduce_scatter(func, t, reduce_op, group_size, group) for t in inputs]


@special(_OPS.all_to_all_single.default)
def _all_to_all_single_rule(func, args, kwargs):
    """Equal parts only, as XLA's all-to-all: part i of dimension 0 goes to replica i."""
    t, output_split_sizes, input_split_sizes, group = args
    groups, world = _group(func, group)
    count = collectives.group_size(groups, world)
    if t.dim() == 0:
        raise ValueError(f"{func} splits dimension 0: give it a tensor of at least one "
                         "dimension.")
    collectives.check_divisible(t.shape, 0, count, "all_to_all_single")
    equal = [t.shape[0] // count] * count
    for name, sizes in (("output_split_sizes", output_split_sizes),
                        ("input_split_sizes", input_split_sizes)):
        if sizes and [int(s) for s in sizes] != equal:
            raise NotImplementedError(
                f"{func} with {name}={list(sizes)}: XLA's all-to-all sends equal parts; on "
                f"XLA tensors give no split sizes or {equal}."
            )
    if not collectives.records(world):
        return _copy(t)
    static = dict(split_dim=0, concat_dim=0, groups=groups, world=world)
    return _record(collectives.all_to_all, t, static, tuple(t.shape))


@special(_OPS.broadcast.default)
def _broadcast_rule(func, args, kwargs):
    """`src` is the rank within the group, as c10d's broadcast takes it."""
    t, src, group = args
    groups, world = _group(func, group)
    count = collectives.group_size(groups, world)
    if not 0 <= src < count:
        raise ValueError(f"{func}: src={src} is not a rank of a group of {count} replicas.")
    if not collectives.records(world):
        return _copy(t)
    return _record(collectives.broadcast, t, dict(root=int(src), groups=groups, world=world),
                   tuple(t.shape))


@special(_OPS.wait_tensor.default)
def _wait_rule(func, args, kwargs):
    return _copy(args[0])  # the collective is part of the graph: nothing to wait on
