"""The engine's own op rules (transfers, copies, empty, scalars) and its lowering lookup.

These ops need the engine itself (device data, the host, the dtype policy), so
they are handled here rather than lowered; everything else goes to the lowering
registry, torch's decompositions, or the CPU fallback (see `dispatch.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import torch
from torch._ops import OpOverload

from torch_xla.lazy import dtype_policy, ir, transfer
from torch_xla.lazy.tensor import XLATensor

aten = torch.ops.aten
SPECIAL: dict[OpOverload, Callable] = {}


def special(*ops: OpOverload | None) -> Callable[[Callable], Callable]:
    def decorate(fn: Callable) -> Callable:
        for op in ops:
            if op is None:
                continue
            if op in SPECIAL:
                raise ValueError(f"{op} already has an engine rule {SPECIAL[op]}")
            SPECIAL[op] = fn
        return fn

    return decorate


# --- the lowering registry, as the engine sees it -------------------------------


def lookup(func: OpOverload):
    import torch_xla.lowering as lowering

    find = getattr(lowering, "lookup", None)
    if find is None:
        from torch_xla.lowering import registry

        find = registry.lookup
    return find(func)


@functools.cache
def decompositions() -> dict:
    import torch_xla.lowering as lowering

    table = getattr(lowering, "decompositions", None)
    if table is not None:
        return table()
    from torch._decomp import core_aten_decompositions

    return core_aten_decompositions()


def foreach_as_loop(func: OpOverload) -> Callable | None:
    """`_foreach_op` as one `op` per list element, when there is no better rule."""
    base = getattr(aten, func._schema.name[len("aten::_foreach_") :], None)
    if base is None or any(r.alias_info for r in func._schema.returns):
        return None
    listed = [isinstance(a.type, torch.ListType) for a in func._schema.arguments]

    def loop(f, args, kwargs):
        n = len(args[0])
        return [
            base(
                *[a[i] if is_list else a for a, is_list in zip(args, listed, strict=False)],
                **kwargs,
            )
            for i in range(n)
        ]

    return loop


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
        host = torch.tensor(value, dtype=dtype)
        found = _scalars[key] = XLATensor(data(transfer.to_device(host, device), dtype, device))
    return found


def inplace_as_functional(func: OpOverload) -> Callable | None:
    """`x.op_(...)` (called by decompositions, below functionalization) as `x <- op(x, ...)`.

    Engine tensors have no views (views live in the functionalization wrapper above), so
    pointing `x` at the functional result is exactly the in-place update."""
    name = func._schema.name.split("::")[1]
    args = func._schema.arguments
    writes_self = bool(args) and args[0].alias_info is not None and args[0].alias_info.is_write
    if not name.endswith("_") or not writes_self:
        return None
    if any(a.alias_info and a.alias_info.is_write for a in args[1:]):
        return None
    packet = getattr(aten, name[:-1], None)
    functional = getattr(packet, func._overloadname, None) if packet is not None else None
    if functional is None:
        return None

    def run(f, a, k):
        out = functional(*a, **k)
        if out.shape != a[0].shape:
            raise RuntimeError(f"{f}: result shape {tuple(out.shape)} differs from the input's")
        a[0]._set(*convert(out, a[0].shape, a[0].dtype).value)
        return a[0]

    return run


# --- engine nodes ----------------------------------------------------------------


def data(array, dtype: torch.dtype, device: int) -> ir.Data:
    return ir.Data(array, (tuple(array.shape), dtype), device)


def engine_node(
    name: str, fn: Callable, statics: tuple, inputs: list, aval, device: int
) -> ir.Node:
    template = (tuple(ir.Slot(i) for i in range(len(inputs))) + statics, ())
    return ir.Node(name, fn, template, inputs, (aval,), device, hash((name, statics, aval)))


def _full(shape, np_dtype, value):
    return jnp.full(shape, value, np_dtype)


def _convert(x, shape, np_dtype):
    return jnp.broadcast_to(x, shape).astype(np_dtype)


def full(shape: tuple, dtype: torch.dtype, value: Any, device: int) -> XLATensor:
    aval = (tuple(shape), dtype)
    return XLATensor(
        engine_node(
            "xla::full", _full, (aval[0], dtype_policy.STORAGE[dtype], value), [], aval, device
        )
    )


def convert(t: XLATensor, shape: tuple, dtype: torch.dtype) -> XLATensor:
    aval = (tuple(shape), dtype)
    if t._node.avals[t._index] == aval:
        return XLATensor(t._node, t._index)
    node = engine_node(
        "xla::convert",
        _convert,
        (aval[0], dtype_policy.STORAGE[dtype]),
        [t.value],
        aval,
        t._node.device,
    )
    return XLATensor(node)


def as_xla(t: torch.Tensor, device: int) -> XLATensor:
    """A CPU 0-dim tensor moved to the device; anything else mixed in is the user's error."""
    if torch._is_functional_tensor(t):
        torch._sync(t)
        return torch._from_functional_tensor(t)
    if t.device.type == "cpu" and t.dim() == 0:
        return XLATensor(data(transfer.to_device(t, device), t.dtype, device))
    from torch_xla.lazy.dispatch import not_xla_error

    raise not_xla_error(t)


def materialize(tensors: list[XLATensor]) -> None:
    from torch_xla.lazy import graph

    graph.sync([t for t in tensors if t._node.rule is not None])


def to_cpu(t: XLATensor) -> torch.Tensor:
    materialize([t])
    return transfer.to_host(t._node.array, t.dtype)


# --- rules -----------------------------------------------------------------------


def _device_index(device: Any) -> int | None:
    device = torch.device(device)
    return None if device.type != "xla" else (device.index or 0)


@special(aten._to_copy.default)
def _to_copy(func, args, kwargs):
    (t,) = args
    dtype = kwargs.get("dtype") or t.dtype
    device = kwargs.get("device")
    if device is not None and torch.device(device).type == "cpu":
        return to_cpu(t).to(dtype)
    target = t._node.device if device is None else _device_index(device)
    if target != t._node.device:
        materialize([t])
        moved = transfer.client().to_device(t._node.array, target)
        t = XLATensor(data(moved, t.dtype, target))
    return convert(t, t.shape, dtype)


@special(aten.copy.default)
def _copy(func, args, kwargs):
    return copy_value(args[0], args[1])


def copy_value(dst: XLATensor, src: torch.Tensor) -> XLATensor:
    """`src` broadcast and cast to `dst`'s shape, dtype and device."""
    device = dst._node.device
    if type(src) is not XLATensor:
        if torch._is_functional_tensor(src):
            src = as_xla(src, device)
        else:
            host = src.to(dst.dtype).expand(dst.shape).contiguous()
            return XLATensor(data(transfer.to_device(host, device), dst.dtype, device))
    if src._node.device != device:
        src = _to_copy(aten._to_copy.default, (src,), {"device": dst.device})
    return convert(src, dst.shape, dst.dtype)


@special(aten.native_batch_norm.default)
def _native_batch_norm(func, args, kwargs):
    """ATen's schema hides that training batch norm updates the running stats in place."""
    x, weight, bias, running_mean, running_var, training, momentum, eps = args
    if not training or running_mean is None:
        from torch_xla.lazy import dispatch, fallback

        lowering = lookup(func)
        if lowering is None:
            return fallback.run_cpu(func, args, kwargs)
        return dispatch.record(func, lowering, args, kwargs)
    out, mean, rstd, new_mean, new_var = aten._native_batch_norm_legit_functional.default(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    running_mean._set(*new_mean.value)
    running_var._set(*new_var.value)
    return out, mean, rstd


@special(aten.equal.default)
def _equal(func, args, kwargs):
    a, b = args
    if a.shape != b.shape:
        return False
    return bool(aten.all.default(aten.eq.Tensor(a, b)).item())


@special(aten.resize.default)
def _resize(func, args, kwargs):
    t, size = args[0], tuple(args[1])
    if size == tuple(t.shape):
        return XLATensor(*t.value)
    from torch_xla.lazy import fallback

    return fallback.run_cpu(func, args, kwargs)


@special(aten._local_scalar_dense.default)
def _local_scalar_dense(func, args, kwargs):
    return to_cpu(args[0]).item()


@special(aten.empty.memory_format, aten.empty_strided.default)
def _empty(func, args, kwargs):
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    return full(tuple(args[0]), dtype, 0, _device_index(kwargs.get("device") or "xla:0") or 0)


@special(aten.empty_like.default, aten.new_empty.default, aten.new_empty_strided.default)
def _empty_like(func, args, kwargs):
    t = args[0]
    shape = tuple(args[1]) if len(args) > 1 else tuple(t.shape)
    return full(shape, kwargs.get("dtype") or t.dtype, 0, t._node.device)


@special(
    aten.detach.default,
    aten.alias.default,
    aten.clone.default,
    aten.detach_copy.default,
    aten.alias_copy.default,
)
def _same_value(func, args, kwargs):
    return XLATensor(*args[0].value)


@special(aten.lift_fresh.default, aten.lift_fresh_copy.default)
def _lift_fresh(func, args, kwargs):
    """`torch.tensor(data, device=xla)` ends here: the new tensor becomes a user tensor."""
    from torch_xla.lazy import functional

    return functional.lift_fresh(XLATensor(*args[0].value))
