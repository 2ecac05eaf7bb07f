"""Manual sharding as JAX: the custom calls that open and close a manual region of an SPMD
program (PyTorch/XLA's `_spmd_full_to_shard_shape`, `_spmd_shard_to_full_shape` and
`_mark_manual_sharding`), and the collectives that run inside one
(`_xla_spmd_all_reduce`, `_xla_spmd_reduce_scatter`).

They are jax's own: `SPMDFullToShardShape` turns a global value into each device's shard
(sharding `{manual}`), `SPMDShardToFullShape` turns the shards back into the global
value laid out as asked, and a `Sharding` custom call with `{manual}` marks a value of
the region. jax emits the same three for `shard_map` when it lowers for XLA's GSPMD
partitioner (`mlir.wrap_with_*`, as `shard_map`'s lowering calls them); ops between
them are lowered as usual on the shard's shape and the partitioner keeps them manual.

Shardy, jax's default partitioner, expresses manual regions only as a nested
`sdy.manual_computation`, which a recorded graph (whose region is open until a tensor
closes it) does not have: a program holding these ops is lowered for GSPMD instead
(`lowering_for_gspmd`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
from jax._src import config as jax_config
from jax._src import core
from jax._src.interpreters import mlir  # the helpers jax's shard_map lowering uses
from jax._src.lib import xla_client as xc
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import hlo
from jax.extend.core import Primitive

from torch_xla.lowering import collectives


class ManualSharding:
    """The `{manual}` sharding, where PyTorch/XLA passes `OpSharding(..., MANUAL)`: a value
    of a manual region, which each device holds as its own shard. It names no layout a
    jax array can have; it is the annotation of a recorded value only."""

    def _to_xla_hlo_sharding(self, ndim: int) -> Any:
        return xc.HloSharding.manual()

    def __eq__(self, other: object) -> bool:
        return type(other) is ManualSharding

    def __hash__(self) -> int:
        return hash(ManualSharding)

    def __repr__(self) -> str:
        return "ManualSharding()"


MANUAL = ManualSharding()


def _manual_proto() -> Any:
    return xc.HloSharding.manual().to_proto()


def _check_gspmd(what: str) -> None:
    if jax_config.use_shardy_partitioner.value:
        raise RuntimeError(
            f"{what} is lowered for XLA's GSPMD partitioner, but this lowering uses Shardy: "
            "lower the program inside `lowering_for_gspmd()` (the engine does so for every "
            "graph holding a manual region).")


@contextlib.contextmanager
def lowering_for_gspmd() -> Iterator[None]:
    """Lower (and compile) for XLA's GSPMD partitioner, which reads these custom calls."""
    with jax_config.use_shardy_partitioner(False):
        yield


# --- the primitives ------------------------------------------------------------------

_full_to_shard_p = Primitive("xla_spmd_full_to_shard_shape")
_full_to_shard_p.def_abstract_eval(
    lambda x, *, shard_shape: core.ShapedArray(shard_shape, x.dtype))


def _full_to_shard_lowering(ctx, x, *, shard_shape):
    _check_gspmd("_spmd_full_to_shard_shape")
    # The operand already carries its layout (a sharded parameter or a sharding
    # constraint), which the partitioner reads to cut the shards.
    return [mlir.wrap_with_full_to_shard_op(ctx, x, ctx.avals_out[0], _manual_proto())]


mlir.register_lowering(_full_to_shard_p, _full_to_shard_lowering)

_mark_manual_p = Primitive("xla_mark_manual_sharding")
_mark_manual_p.def_abstract_eval(lambda x: core.ShapedArray(x.shape, x.dtype))


def _mark_manual_lowering(ctx, x):
    _check_gspmd("_mark_manual_sharding")
    return [mlir.wrap_with_sharding_op(ctx, x, ctx.avals_out[0], _manual_proto(),
                                       allow_shardy_lowering=False)]


mlir.register_lowering(_mark_manual_p, _mark_manual_lowering)

_shard_to_full_p = Primitive("xla_spmd_shard_to_full_shape")
_shard_to_full_p.def_abstract_eval(
    lambda x, *, full_shape, sharding: core.ShapedArray(full_shape, x.dtype))


def _shard_to_full_lowering(ctx, x, *, full_shape, sharding):
    _check_gspmd("_spmd_shard_to_full_shape")
    # As shard_map's GSPMD lowering closes a region: the operand marked manual, then
    # the shards put together as `sharding`.
    aval = ctx.avals_in[0]
    x = mlir.wrap_with_sharding_op(ctx, x, aval, _manual_proto(), allow_shardy_lowering=False)
    proto = sharding._to_xla_hlo_sharding(len(full_shape)).to_proto()
    return [mlir.wrap_with_shard_to_full_op(ctx, x, ctx.avals_out[0], proto)]


mlir.register_lowering(_shard_to_full_p, _shard_to_full_lowering)


# --- what the engine's nodes call ------------------------------------------------------


def full_to_shard(x: Any, shard_shape: tuple[int, ...]) -> Any:
    """Each device's shard of the global `x` (a value of the manual region)."""
    return _full_to_shard_p.bind(x, shard_shape=tuple(shard_shape))


def mark_manual(x: Any) -> Any:
    """`x` annotated as a value of the manual region."""
    return _mark_manual_p.bind(x)


def shard_to_full(x: Any, full_shape: tuple[int, ...], sharding: Any) -> Any:
    """The global value of `full_shape` whose shards, laid out as `sharding`, are `x`."""
    return _shard_to_full_p.bind(x, full_shape=tuple(full_shape), sharding=sharding)


# --- collectives inside a manual region --------------------------------------------------
# Each device runs them on its own shard. Their replica groups name global device ids
# (XLA's `use_global_device_ids`), as PyTorch/XLA's SPMD collectives do: every device of
# the program in exactly one group.

_REDUCERS = {"sum": hlo.AddOp, "mul": hlo.MulOp, "min": hlo.MinOp, "max": hlo.MaxOp,
             "and": hlo.AndOp, "or": hlo.OrOp}
Groups = tuple[tuple[int, ...], ...]  # always given here: one group of all is spelled out


def _collective_attributes() -> dict:
    return {"channel_handle": hlo.ChannelHandle.get(mlir.COLLECTIVE_CHANNEL_ID,
                                                    mlir.DEVICE_TO_DEVICE_TYPE),
            "use_global_device_ids": True}


def _with_reducer(op: Any, aval: Any, reduce_type: str) -> Any:
    """`op` with its reduction region: `reduce_type` of two scalars of `aval`'s dtype."""
    scalar = ir.RankedTensorType.get([], mlir.dtype_to_ir_type(aval.dtype))
    block = op.regions[0].blocks.append(scalar, scalar)
    with ir.InsertionPoint(block):
        hlo.return_([_REDUCERS[reduce_type](*block.arguments).result])
    return op


def _groups_attribute(groups: Groups) -> Any:
    return ir.DenseIntElementsAttr.get(np.asarray(groups, np.int64))


_spmd_all_reduce_p = Primitive("xla_spmd_all_reduce")
_spmd_all_reduce_p.def_abstract_eval(lambda x, **_: core.ShapedArray(x.shape, x.dtype))


def _spmd_all_reduce_lowering(ctx, x, *, reduce_type: str, groups: Groups):
    _check_gspmd("_xla_spmd_all_reduce")
    aval = ctx.avals_out[0]
    result = mlir.aval_to_ir_type(ctx.module_context, aval)
    op = hlo.AllReduceOp([result], [x], _groups_attribute(groups), **_collective_attributes())
    return _with_reducer(op, aval, reduce_type).results


mlir.register_lowering(_spmd_all_reduce_p, _spmd_all_reduce_lowering)

_spmd_reduce_scatter_p = Primitive("xla_spmd_reduce_scatter")
_spmd_reduce_scatter_p.def_abstract_eval(
    lambda x, *, dim, count, **_: core.ShapedArray(
        collectives.resized(x.shape, dim, divisor=count), x.dtype))


def _spmd_reduce_scatter_lowering(ctx, x, *, reduce_type: str, dim: int, count: int,
                                  groups: Groups):
    _check_gspmd("_xla_spmd_reduce_scatter")
    aval = ctx.avals_out[0]
    result = mlir.aval_to_ir_type(ctx.module_context, aval)
    op = hlo.ReduceScatterOp(result, x, dim, _groups_attribute(groups), **_collective_attributes())
    return _with_reducer(op, aval, reduce_type).results


mlir.register_lowering(_spmd_reduce_scatter_p, _spmd_reduce_scatter_lowering)


def spmd_all_reduce(x: Any, reduce_type: str, scale: float, groups: Groups) -> Any:
    """Each device's shard `x` reduced over its group of devices, times `scale`."""
    out = _spmd_all_reduce_p.bind(x, reduce_type=reduce_type, groups=groups)
    return collectives.scaled(out, scale)


def spmd_reduce_scatter(x: Any, reduce_type: str, scale: float, dim: int, count: int,
                        groups: Groups) -> Any:
    """Each device's shard `x` reduced over its group of `count` devices, then cut in
    `count` pieces along `dim`: the device at position i of its group keeps piece i."""
    out = _spmd_reduce_scatter_p.bind(x, reduce_type=reduce_type, dim=dim, count=count,
                                      groups=groups)
    return collectives.scaled(out, scale)
