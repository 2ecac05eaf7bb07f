"""Manual sharding of engine tensors (SPMD mode): a region of the program where each device
computes on its own shard, opened and closed by the user (`xs.enable_manual_sharding`).

`full_to_shard(t)` gives a tensor of each device's shard shape, sharded `{manual}`; ops
on it run per shard; `all_reduce` and `reduce_scatter` combine the shards of groups of
devices; `mark_manual(t)` annotates a value of the region; `shard_to_full` closes it,
giving the global tensor laid out as asked. Each is a node of the graph
(`lowering/manual.py` lowers them to jax's custom calls and XLA's collectives);
`partitioner(order)` lowers a graph holding one for XLA's GSPMD partitioner, the one that
reads them.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from torch_xla.lazy import nodes, sharding
from torch_xla.lazy.sharding import (
    FULL_TO_SHARD_OP,
    MANUAL_OP,
    MANUAL_OPS,
    SHARD_TO_FULL_OP,
    SPMD_ALL_REDUCE_OP,
    SPMD_REDUCE_SCATTER_OP,
)
from torch_xla.lazy.tensor import XLATensor
from torch_xla.lowering import collectives
from torch_xla.lowering import manual as lowering
from torch_xla.pjrt import spmd
from torch_xla.pjrt.client import client


def _full_to_shard(x: Any, layout: sharding.Layout, shard_shape: tuple) -> Any:
    return lowering.full_to_shard(x, shard_shape)


def _mark_manual(x: Any, layout: sharding.Layout) -> Any:
    return lowering.mark_manual(x)


def _shard_to_full(x: Any, layout: sharding.Layout, full_shape: tuple) -> Any:
    return lowering.shard_to_full(x, full_shape, layout.sharding)


def shard_shape(sharding_: Any, shape: tuple, what: str) -> tuple[int, ...]:
    """Each device's tile of `shape` laid out as `sharding_`. XLA's partitioner cannot
    open or close a manual region over padded tiles, so the tiles must divide `shape`."""
    hlo = sharding_._to_xla_hlo_sharding(len(shape))
    if hlo.is_replicated():
        return tuple(shape)
    tiles = list(hlo.tile_assignment_dimensions())[:len(shape)]
    if any(n % d for n, d in zip(shape, tiles, strict=True)):
        raise RuntimeError(f"{what}: a manual region needs even shards, but the {shape} "
                           f"tensor is cut into {tiles} tiles per dim: pad it to a multiple "
                           "of the mesh axes first (or leave that dim unsharded).")
    return tuple(n // d for n, d in zip(shape, tiles, strict=True))


def full_to_shard(t: XLATensor) -> XLATensor:
    """A new tensor holding each device's shard of `t`, sharded `{manual}`."""
    sharding.check_spmd("_spmd_full_to_shard_shape")
    text = sharding.spec(t)
    if not text:
        raise RuntimeError("_spmd_full_to_shard_shape: Input tensor is not sharded: mark it "
                           "first (xs.mark_sharding(t, mesh, partition_spec)).")
    if text == "{manual}":
        raise RuntimeError("_spmd_full_to_shard_shape: the tensor is already sharded "
                           "{manual} (it holds one shard per device): use it as it is.")
    node, index = t.value
    shape, dtype = node.avals[index]
    tile = shard_shape(_layout_of(t), shape, "_spmd_full_to_shard_shape")
    layout = sharding.Layout(lowering.MANUAL, len(tile))
    return XLATensor(nodes.engine_node(FULL_TO_SHARD_OP, _full_to_shard, (layout, tile),
                                       [(node, index)], (tile, dtype), node.device))


def _layout_of(t: XLATensor) -> Any:
    node = t._node
    if node.rule is None:
        return sharding.data_layout(node)
    return node.template[0][1].sharding  # a constraint or a manual node's Layout


def mark_manual(t: XLATensor) -> None:
    """Annotate the value of `t` as one of a manual region (in place)."""
    sharding.check_spmd("_mark_manual_sharding")
    node, index = t.value
    if node.rule is None:
        raise RuntimeError("_mark_manual_sharding: Marking any data tensors as manual is not "
                           "supported: only a value computed in the manual region (the result "
                           "of an op on a tensor from _spmd_full_to_shard_shape) can be.")
    if node.op == MANUAL_OP:
        return
    if node.op == sharding.CONSTRAINT_OP:  # the manual annotation replaces the layout
        node, index = node.inputs[0]
    aval = node.avals[index]
    layout = sharding.Layout(lowering.MANUAL, len(aval[0]))
    t._set(nodes.engine_node(MANUAL_OP, _mark_manual, (layout,), [(node, index)], aval,
                             node.device))


def shard_to_full(t: XLATensor, layout_: Any, full_shape: tuple, dtype: torch.dtype
                  ) -> XLATensor:
    """The global tensor of `full_shape` whose shards, laid out as `layout_`, are the
    manual tensor `t`."""
    sharding.check_spmd("_spmd_shard_to_full_shape")
    if sharding.spec(t) != "{manual}":
        raise RuntimeError("_spmd_shard_to_full_shape: Input tensor is not manual sharded: "
                           "pass a tensor from _spmd_full_to_shard_shape, or mark it with "
                           "xs._mark_manual_sharding first.")
    node, index = t.value
    shape, own_dtype = node.avals[index]
    full_shape = tuple(int(d) for d in full_shape)
    if dtype != own_dtype:
        raise RuntimeError(f"_spmd_shard_to_full_shape: the shards are {own_dtype}, but the "
                           f"output dtype asked for is {dtype}: pass the shards' dtype.")
    wanted = shard_shape(layout_, full_shape, "_spmd_shard_to_full_shape")
    if wanted != tuple(shape):
        raise RuntimeError(f"_spmd_shard_to_full_shape: a {full_shape} tensor laid out as "
                           f"{sharding.Layout(layout_, len(full_shape)).text} has shards of "
                           f"shape {wanted}, but the tensor's shards are {tuple(shape)}: pass "
                           "the full shape and sharding the shards were cut with.")
    layout = sharding.Layout(layout_, len(full_shape))
    return XLATensor(nodes.engine_node(SHARD_TO_FULL_OP, _shard_to_full, (layout, full_shape),
                                       [(node, index)], (full_shape, dtype), node.device))


def _all_reduce(x: Any, layout: sharding.Layout, reduce_type: str, scale: float,
                groups: tuple) -> Any:
    return lowering.spmd_all_reduce(x, reduce_type, scale, groups)


def _reduce_scatter(x: Any, layout: sharding.Layout, reduce_type: str, scale: float,
                    dim: int, count: int, groups: tuple) -> Any:
    return lowering.spmd_reduce_scatter(x, reduce_type, scale, dim, count, groups)


def _in_region(t: XLATensor) -> bool:
    """Whether `t` is computed from a manual region's value (a walk of its graph back to
    where the region opened, or to data)."""
    seen, stack = set(), [t._node]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op in MANUAL_OPS and node.op != SHARD_TO_FULL_OP:
            return True
        stack.extend(n for n, _ in node.inputs if n.op != SHARD_TO_FULL_OP)
    return False


def _device_groups(groups: Any, what: str) -> tuple[tuple[int, ...], ...]:
    """`groups` of global device ids, checked: equal-sized, every device of the SPMD
    program in exactly one (None or []: one group of every device)."""
    count = len(client().global_devices)
    if not groups:
        return (tuple(range(count)),)
    out = tuple(tuple(int(d) for d in g) for g in groups)
    if sorted(d for g in out for d in g) != list(range(count)) or len({len(g) for g in out}) != 1:
        raise ValueError(f"{what}: groups {[list(g) for g in out]} must be equal-sized lists "
                         f"of device ids that together name each of the {count} devices "
                         f"0..{count - 1} exactly once.")
    return out


def _collective_input(t: XLATensor, reduce_type: str, what: str) -> tuple:
    sharding.check_spmd(what)
    collectives.check_reduce_type(reduce_type)
    if not _in_region(t):
        raise RuntimeError(f"{what} runs inside a manual region, on each device's shard: "
                           "call it on a tensor computed from xs.enable_manual_sharding(...) "
                           "(or _spmd_full_to_shard_shape), before the region is closed.")
    node, index = t.value
    return node, index, node.avals[index]


def all_reduce(t: XLATensor, reduce_type: str, scale: float, groups: Any) -> XLATensor:
    """Each device's shard of `t` reduced (`reduce_type`) over its group of devices, times
    `scale` (PyTorch/XLA's `_xla_spmd_all_reduce`)."""
    what = "_xla_spmd_all_reduce"
    node, index, aval = _collective_input(t, reduce_type, what)
    groups = _device_groups(groups, what)
    layout = sharding.Layout(lowering.MANUAL, len(aval[0]))
    return XLATensor(nodes.engine_node(
        SPMD_ALL_REDUCE_OP, _all_reduce, (layout, reduce_type, float(scale), groups),
        [(node, index)], aval, node.device))


def reduce_scatter(t: XLATensor, reduce_type: str, scale: float, dim: int, count: int,
                   groups: Any) -> XLATensor:
    """Each device's shard of `t` reduced over its group of `count` devices and cut along
    `dim` into `count` pieces, the i-th device of a group keeping piece i, times `scale`
    (PyTorch/XLA's `_xla_spmd_reduce_scatter`)."""
    what = "_xla_spmd_reduce_scatter"
    node, index, (shape, dtype) = _collective_input(t, reduce_type, what)
    groups = _device_groups(groups, what)
    if int(count) != len(groups[0]):
        raise ValueError(f"{what}: shard_count {count} must be the size of each group, "
                         f"{len(groups[0])}.")
    dim = collectives.check_dim(shape, int(dim))
    collectives.check_divisible(shape, dim, int(count), what)
    layout = sharding.Layout(lowering.MANUAL, len(shape))
    out = (collectives.resized(shape, dim, divisor=int(count)), dtype)
    return XLATensor(nodes.engine_node(
        SPMD_REDUCE_SCATTER_OP, _reduce_scatter,
        (layout, reduce_type, float(scale), dim, int(count), groups),
        [(node, index)], out, node.device))


def partitioner(order: list) -> Any:
    """The context to lower a graph's nodes (`order`) in: XLA's GSPMD partitioner for every
    program of SPMD mode (PyTorch/XLA's partitioner; jaxlib 0.10's Shardy computed some
    gradients of a convolution twice over, docs/design.md) and for a graph that opens,
    marks or closes a manual region; else jax's default."""
    if spmd.enabled() or any(n.op in MANUAL_OPS for n in order):
        return lowering.lowering_for_gspmd()
    return contextlib.nullcontext()
