"""Building IR values: device data, the engine's own nodes, and scalars lifted to inputs.

Everything here makes a node or an `XLATensor` from arguments it is given; nothing
dispatches an op or runs a graph, so every other engine module can build on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import torch
from torch._ops import OpOverload

from torch_xla.lazy import dtype_policy, ir, transfer
from torch_xla.lazy.tensor import XLATensor, not_xla_error

# --- device data and engine nodes ------------------------------------------------------


def data(array, dtype: torch.dtype, device: int) -> ir.Data:
    return ir.Data(array, (tuple(array.shape), dtype), device)


def from_host(t: torch.Tensor, device: int) -> XLATensor:
    """A CPU tensor copied to `device` as device data."""
    return XLATensor(data(transfer.to_device(t, device), t.dtype, device))


def engine_node(
    name: str, fn: Callable, statics: tuple, inputs: list, aval: ir.Aval, device: int
) -> ir.Node:
    """A one-output node computing `fn(*inputs, *statics)`."""
    template = (tuple(ir.Slot(i) for i in range(len(inputs))) + statics, ())
    return ir.Node(name, fn, template, inputs, (aval,), device, hash((name, statics, aval)))


def custom(
    rule: Callable, op: str, inputs: Sequence[XLATensor], static: dict,
    out_avals: Sequence[ir.Aval],
) -> list[XLATensor]:
    """Record `rule(*inputs, **static)`, an op that is not ATen's (a collective, say)."""
    device = inputs[0]._node.device
    values = [(t._node, t._index) for t in inputs]
    template = (tuple(ir.Slot(i) for i in range(len(inputs))), tuple(sorted(static.items())))
    key_hash = hash((op, template, tuple(n.avals[i] for n, i in values), tuple(out_avals)))
    node = ir.Node(op, rule, template, values, tuple(out_avals), device, key_hash)
    return [XLATensor(node, i) for i in range(len(out_avals))]


def _full(shape, np_dtype, value):
    return jnp.full(shape, value, np_dtype)


def _convert(x, shape, np_dtype):
    return jnp.broadcast_to(x, shape).astype(np_dtype)


def full(shape: tuple, dtype: torch.dtype, value: Any, device: int) -> XLATensor:
    aval = (tuple(shape), dtype)
    statics = (aval[0], dtype_policy.STORAGE[dtype], value)
    return XLATensor(engine_node("xla::full", _full, statics, [], aval, device))


def convert(t: XLATensor, shape: tuple, dtype: torch.dtype) -> XLATensor:
    """`t` broadcast to `shape` and cast to `dtype` (the same value if it already is)."""
    aval = (tuple(shape), dtype)
    if t._node.avals[t._index] == aval:
        return XLATensor(t._node, t._index)
    statics = (aval[0], dtype_policy.STORAGE[dtype])
    return XLATensor(engine_node("xla::convert", _convert, statics, [t.value], aval,
                                 t._node.device))


def as_xla(t: torch.Tensor, device: int) -> XLATensor:
    """A CPU 0-dim tensor moved to the device; anything else mixed in is the user's error."""
    if torch._is_functional_tensor(t):
        torch._sync(t)
        return torch._from_functional_tensor(t)
    if t.device.type == "cpu" and t.dim() == 0:
        return from_host(t, device)
    raise not_xla_error(t)


# --- scalars that change every step become graph inputs ----------------------------

# Scalar arguments that typically carry data (learning-rate ratios, bias corrections): a
# float other than these special values is fed as a device scalar, so a new value does not
# recompile (PyTorch/XLA does the same). Other scalars stay compile-time constants.
LIFTED_ARGUMENTS = frozenset({"value", "other", "scalar", "scalars"})
SPECIAL_SCALARS = frozenset({0.0, 1.0, -1.0})
# `Tensor` too: `x / 0.37` reaches the engine as div.Tensor with a Python float.
_LIFTABLE_TYPES = ("number", "Scalar", "List[number]", "List[Scalar]", "Tensor")


class Lifted:
    """A Python float that the graph receives as a runtime input."""

    __slots__ = ("value",)

    def __init__(self, value: float) -> None:
        self.value = value


def lift_plan(func: OpOverload) -> tuple:
    """(position, name) of each argument of `func` whose float values are lifted."""
    plan = []
    for i, a in enumerate(func._schema.arguments):
        kind = str(a.type)
        if a.name in LIFTED_ARGUMENTS and kind in _LIFTABLE_TYPES:
            plan.append((None if a.kwarg_only else i, a.name))
    return tuple(plan)


def _lift_value(v: Any) -> Any:
    if type(v) is float and v not in SPECIAL_SCALARS:
        return Lifted(v)
    if type(v) is list or type(v) is tuple:
        return [_lift_value(x) for x in v]
    return v


def lift(plan: tuple, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    args = list(args)
    for i, name in plan:
        if i is not None and i < len(args):
            args[i] = _lift_value(args[i])
        elif name in kwargs:
            kwargs = {**kwargs, name: _lift_value(kwargs[name])}
    return tuple(args), kwargs


_scalars: dict[tuple, XLATensor] = {}


def device_scalar(value: float, dtype: torch.dtype, device: int) -> XLATensor:
    key = (value, dtype, device)
    found = _scalars.get(key)
    if found is None or found._node.rule is not None:
        if len(_scalars) > 1024:
            _scalars.clear()
        found = _scalars[key] = from_host(torch.tensor(value, dtype=dtype), device)
    return found
