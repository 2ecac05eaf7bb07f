"""Building IR values: device data, the engine's own nodes, and scalars lifted to inputs.

Everything here makes a node or an `XLATensor` from arguments it is given; nothing
dispatches an op or runs a graph, so every other engine module can build on it.
Functions returning a *value* (`(node, output index)`) make no `XLATensor`: the engine
uses them for intermediate values, so that `CreateXlaTensor` counts the tensors a
program sees.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch
from torch._ops import OpOverload

from torch_xla import _metrics
from torch_xla.lazy import dtype_policy, ir, transfer
from torch_xla.lazy.tensor import XLATensor, device_index, not_xla_error
from torch_xla.pjrt import spmd, threads
from torch_xla.pjrt.client import client, on_start

Value = tuple[ir.Node, int]

# --- device data and engine nodes ------------------------------------------------------


def target_device(device: Any) -> int:
    """The index of the xla device a factory names (`device=`; None: the thread's current
    one), checked to exist now: a value recorded for a missing device would fail only at
    the sync that computes it, far from the line that made it."""
    index = device_index(device)
    client().device(index)  # raises "xla:N does not exist: this process has ..."
    return index


def data(array, dtype: torch.dtype, device: int, owned: bool = False) -> ir.Data:
    """A leaf holding `array`; `owned`: no other leaf holds it (a fresh copy), so a
    program may take its buffer over (`ir.Data`)."""
    return ir.Data(array, (tuple(array.shape), dtype), device, owned=owned)


class Placeholder(ir.NoBuffer):
    """A leaf the user made to trace with (`xb.create_placeholder_tensor`): a shape and a
    dtype, no value; a graph reading it becomes a program parameter."""

    __slots__ = ()

    def __init__(self, aval: ir.Aval, device: int, sharding: Any = None) -> None:
        super().__init__("xla::device_data", aval, device)
        self.annotated = sharding or False  # the layout of the parameter it stands for

    def missing(self) -> Exception:
        return RuntimeError(
            "A placeholder tensor (xb.create_placeholder_tensor) has no value to read: it "
            "stands for a program parameter while a graph is traced. Read the results of a "
            "program that received real data instead.")


def host_data(t: torch.Tensor, device: int) -> ir.Data:
    """A CPU tensor copied to `device` (a 0-dim one through the scalar cache). The copy
    is the leaf's own (`transfer.to_device` copies the host memory first), so a sync
    that overwrites the tensor may donate its buffer. In SPMD mode the copy stays on the
    host until something needs it on the devices (`HostData`)."""
    if t.dim() == 0:
        return scalar_data(t, device)
    if spmd.enabled():
        return HostData(transfer.host_copy(t), t.dtype, device)
    return data(transfer.to_device(t, device), t.dtype, device, owned=True)


_DEVICE_ARRAY = ir.Data.array  # the slot `HostData.array` fills on upload
_VIRTUAL_DEVICE_USAGE = _metrics.counter("VirtualDeviceUsage")


class HostData(ir.Data):
    """SPMD mode: a CPU tensor moved to the virtual device, kept as a host copy until a
    program or a read needs its array (then copied whole to every device) or
    `xs.mark_sharding` lays it out (then each device receives only its tiles). As on
    PyTorch/XLA's virtual device: `model.to('xla')` followed by `mark_sharding` never holds
    a whole copy of each weight on every device. `host` is None once uploaded."""

    __slots__ = ("host",)

    def __init__(self, host: np.ndarray, dtype: torch.dtype, device: int) -> None:
        super().__init__(None, (tuple(host.shape), dtype), device, owned=True)
        self.host = host

    @property
    def array(self) -> Any:
        if self.host is not None:
            self.array = client().to_device(self.host, self.device)
        return _DEVICE_ARRAY.__get__(self)

    @array.setter
    def array(self, value: Any) -> None:
        self.host = None
        _DEVICE_ARRAY.__set__(self, value)

    def upload(self, layout: Any) -> Any:
        """The host copy on the devices laid out as the jax sharding `layout` (each device
        receives its tiles), or None once uploaded already."""
        if self.host is None:
            return None
        _VIRTUAL_DEVICE_USAGE.value += 1
        array = client().to_device(self.host, self.device, layout)
        self.array = array
        self.owned = False  # the caller's leaf holds the array too
        return array


def from_host(t: torch.Tensor, device: int) -> XLATensor:
    """A CPU tensor copied to `device` as device data."""
    return XLATensor(host_data(t, device))


# PyTorch/XLA's device data cache: a scalar value is copied to a device once and shared
# by every use (`DeviceDataCacheMiss` counts the copies). Device data is never written
# in place, so sharing it is safe. Each use gets its own leaf on the shared buffer: one
# leaf for equal values would make a graph's structure depend on values, and processes
# whose values differ (the rank) would compile different replicated programs.
SCALAR_CACHE_SIZE = 1024
_scalar_data: dict[tuple, jnp.ndarray] = {}
_CACHE_MISS = _metrics.counter("DeviceDataCacheMiss")


def scalar_data(t: torch.Tensor, device: int) -> ir.Data:
    """The value of the 0-dim CPU tensor `t` as device data on `device`, from the cache."""
    value = t.item()
    # repr tells -0.0 from 0.0 (equal, with one hash) and makes every NaN one key
    key = (t.dtype, device, repr(value) if type(value) in (float, complex) else value)
    found = _scalar_data.get(key)
    if found is None:
        _CACHE_MISS.value += 1
        if len(_scalar_data) >= SCALAR_CACHE_SIZE:
            _scalar_data.clear()
        found = _scalar_data[key] = transfer.to_device(t, device)
    return data(found, t.dtype, device)


def engine_node(
    name: str, fn: Callable, statics: tuple, inputs: list, aval: ir.Aval, device: int
) -> ir.Node:
    """A one-output node computing `fn(*inputs, *statics)`."""
    template = (tuple(ir.Slot(i) for i in range(len(inputs))) + statics, ())
    return ir.Node(name, fn, template, inputs, (aval,), device, hash((name, statics, aval)))


def custom(
    rule: Callable, op: str, inputs: Sequence[XLATensor], static: dict,
    out_avals: Sequence[ir.Aval], layouts: Sequence[tuple] | None = None,
    device: int | None = None,
) -> list[XLATensor]:
    """Record `rule(*inputs, **static)`, an op that is not ATen's (a collective, say);
    `layouts[i]`, if given, is output i's (strides, storage offset) (`layout.py`);
    `device`: where an op without inputs runs (by default its first input's device)."""
    device = inputs[0]._node.device if device is None else device
    values = [(t._node, t._index) for t in inputs]
    template = (tuple(ir.Slot(i) for i in range(len(inputs))), tuple(sorted(static.items())))
    key_hash = hash((op, template, tuple(n.avals[i] for n, i in values), tuple(out_avals)))
    node = ir.Node(op, rule, template, values, tuple(out_avals), device, key_hash)
    if layouts is None:
        return [XLATensor(node, i) for i in range(len(out_avals))]
    return [XLATensor(node, i, *(found or ())) for i, found in enumerate(layouts)]


def _full(shape, np_dtype, value):
    return jnp.full(shape, value, np_dtype)


def _convert(x, shape, np_dtype):
    return jnp.broadcast_to(x, shape).astype(np_dtype)


def full(shape: tuple, dtype: torch.dtype, value: Any, device: int) -> XLATensor:
    aval = (tuple(shape), dtype)
    statics = (aval[0], dtype_policy.STORAGE[dtype], value)
    return XLATensor(engine_node("xla::full", _full, statics, [], aval, device))


def converted(value: Value, shape: tuple, dtype: torch.dtype) -> Value:
    """`value` broadcast to `shape` and cast to `dtype` (itself if it already is)."""
    node, index = value
    aval = (tuple(shape), dtype)
    if node.avals[index] == aval:
        return value
    statics = (aval[0], dtype_policy.STORAGE[dtype])
    return engine_node("xla::convert", _convert, statics, [value], aval, node.device), 0


def convert(t: XLATensor, shape: tuple, dtype: torch.dtype) -> XLATensor:
    """`t` broadcast to `shape` and cast to `dtype` (the same value if it already is)."""
    return XLATensor(*converted(t.value, shape, dtype))


def as_value(t: torch.Tensor, device: int) -> Value:
    """The value of a tensor mixed into an op on `device`: a functional XLA tensor's, or a
    CPU 0-dim tensor's (from the scalar cache); anything else is the user's error."""
    if torch._is_functional_tensor(t):
        torch._sync(t)
        return torch._from_functional_tensor(t).value
    if t.device.type == "cpu" and t.dim() == 0:
        return scalar_data(t, device), 0
    raise not_xla_error(t)


def as_xla(t: torch.Tensor, device: int) -> XLATensor:
    """A CPU 0-dim tensor moved to the device; anything else mixed in is the user's error."""
    if torch._is_functional_tensor(t):
        torch._sync(t)
        return torch._from_functional_tensor(t)
    return XLATensor(*as_value(t, device))


# --- scalars that change every step become graph inputs ----------------------------

# Scalar arguments that typically carry data (learning-rate ratios, bias corrections, step
# counts, offsets): a number other than these special values is fed as a device scalar, so
# a new value does not recompile (PyTorch/XLA does the same, `XLA_NO_SPECIAL_SCALARS=1`
# included: then 0, 1 and -1 are fed too). Other scalars stay compile-time constants.
LIFTED_ARGUMENTS = frozenset({"value", "other", "scalar", "scalars"})
# ... and these of the ops named: `param.add_(grad, alpha=-lr)` (SGD under a learning-rate
# schedule), `exp_avg.lerp_(grad, 1 - beta1)` (a momentum schedule), L-BFGS's
# `q.add_(old_dirs[i], alpha=-al[i])`, the fused optimizer steps' `float lr`. Their
# lowerings take a 0-dim array for them.
LIFTED_FOR = {
    "alpha": frozenset({"aten::add", "aten::sub", "aten::rsub", "aten::_foreach_add",
                        "aten::_foreach_sub"}),
    "weight": frozenset({"aten::lerp", "aten::_foreach_lerp"}),
    "lr": frozenset({"aten::_fused_adam", "aten::_fused_adamw", "aten::_fused_sgd",
                     "aten::_fused_adagrad"}),
}
NO_SPECIAL_SCALARS = os.environ.get("XLA_NO_SPECIAL_SCALARS", "0") not in ("", "0")
SPECIAL_SCALARS = frozenset() if NO_SPECIAL_SCALARS else frozenset({0.0, 1.0, -1.0})
_NONE: frozenset = frozenset()
# Replicas (the processes of a job, or replica threads) must record one program: rank 0's
# `x + 2 * rank` would otherwise keep its 0 as a constant where rank 1 feeds its 2, two
# programs for one step with collectives. Set when the runtime starts.
_MULTIPROCESS = False


def _note_processes(runtime: Any) -> None:
    global _MULTIPROCESS
    _MULTIPROCESS = runtime.process_count() > 1


on_start(_note_processes)


def special_scalars() -> frozenset:
    """The numbers kept as compile-time constants (0, 1, -1), none in a replicated job."""
    if _MULTIPROCESS or threads.replicas() is not None:
        return _NONE
    return SPECIAL_SCALARS


# `Tensor` too: `x / 0.37` reaches the engine as div.Tensor with a Python float.
_LIFTABLE_TYPES = ("number", "Scalar", "List[number]", "List[Scalar]", "Tensor")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1  # a larger int stays a constant, as torch's


class Lifted:
    """A Python float or int that the graph receives as a runtime input."""

    __slots__ = ("value",)

    def __init__(self, value: float | int) -> None:
        self.value = value


def lift_plan(func: OpOverload) -> tuple:
    """(position, name) of each argument of `func` whose number values are lifted."""
    plan = []
    for i, a in enumerate(func._schema.arguments):
        kind = str(a.type)
        if a.name in LIFTED_ARGUMENTS:
            liftable = kind in _LIFTABLE_TYPES
        else:
            liftable = (func._schema.name in LIFTED_FOR.get(a.name, ())
                        and kind in (*_LIFTABLE_TYPES, "float"))
        if liftable:
            plan.append((None if a.kwarg_only else i, a.name))
    return tuple(plan)


def _lift_value(v: Any) -> Any:
    kind = type(v)
    if kind is float or kind is int:  # never a bool: True is a flag, not data
        if v in special_scalars() or (kind is int and not _INT64_MIN <= v <= _INT64_MAX):
            return v
        return Lifted(v)
    if kind is list or kind is tuple:
        return [_lift_value(x) for x in v]
    return v


def lift(plan: tuple, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """`args` and `kwargs` with the numbers that `plan` names lifted (themselves when none
    is: an op on a tensor and a special scalar copies nothing)."""
    lifted = None
    for i, name in plan:
        if i is not None and i < len(args):
            v = args[i]
            kind = type(v)
            if kind is float:  # inline: most ops on the hot path pass a float or a tensor
                if v in special_scalars():
                    continue
                new = Lifted(v)
            elif kind is int or kind is list or kind is tuple:
                new = _lift_value(v)
                if new is v:
                    continue
            else:
                continue  # a tensor, a bool: nothing to lift
            lifted = list(args) if lifted is None else lifted
            lifted[i] = new
        elif name in kwargs:
            kwargs = {**kwargs, name: _lift_value(kwargs[name])}
    return (args if lifted is None else tuple(lifted)), kwargs


_lifted: dict[tuple, jnp.ndarray] = {}  # by Python value: no CPU tensor made on the hot path


def lifted_data(value: float | int, dtype: torch.dtype, device: int) -> ir.Data:
    """A lifted scalar as device data (from the scalar cache). A zero is lifted only under
    XLA_NO_SPECIAL_SCALARS, and keyed by its text so that -0.0 is not 0.0."""
    key = (value, dtype, device) if value else (repr(value), dtype, device)
    found = _lifted.get(key)
    if found is None:
        if len(_lifted) >= SCALAR_CACHE_SIZE:
            _lifted.clear()
        found = _lifted[key] = scalar_data(torch.tensor(value, dtype=dtype), device).array
    return ir.Data(found, ((), dtype), device)  # a leaf per use, as in `scalar_data`


def device_scalar(value: float, dtype: torch.dtype, device: int) -> XLATensor:
    return XLATensor(lifted_data(value, dtype, device))
