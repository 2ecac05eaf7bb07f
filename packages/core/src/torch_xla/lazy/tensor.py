"""The XLA tensor: a wrapper subclass on `xla:N` that holds an IR value, and the errors
about tensors that are not where an op needs them.

The user never sees this class directly: every XLA tensor a program holds is
PyTorch's functionalization wrapper around one of these (see `functional.py`),
so views and in-place ops arrive here already rewritten into functional ops.
Each op on it goes to the handler `dispatch.py` installs with `set_dispatcher`.
In eager mode a pending value runs as soon as a tensor would hold it, through the
runner `eager.py` installs with `set_eager_runner`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torch_xla import _metrics
from torch_xla.lazy import ir
from torch_xla.pjrt import threads


class _Devices(dict):
    """`torch.device('xla', index)` by index, made on first use: a lookup per tensor, no call."""

    def __missing__(self, index: int) -> torch.device:
        found = self[index] = torch.device("xla", index)
        return found


_DEVICES = _Devices()
_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass
_inference_mode_enabled = torch.is_inference_mode_enabled
_STRIDED = torch.strided
_weakref = weakref.ref

# Every live XLA tensor (for DestroyXlaTensor) and the ones holding pending IR.
_live: dict[int, weakref.ref] = {}
_pending: dict[int, weakref.ref] = {}
_CREATED = _metrics.counter("CreateXlaTensor")
_DESTROYED = _metrics.counter("DestroyXlaTensor")

# Eager mode's runner (None in lazy mode): runs a pending node now and returns its outputs
# as device data (None for a None output). `_last_run` keeps the latest node's outputs,
# since the outputs of a multi-output node become tensors one by one.
_run_now: Callable[[ir.Node], list] | None = None
_last_run: tuple[ir.Node, list] | None = None


def _on_destroy(ref: weakref.ref) -> None:
    key = id(ref)
    _live.pop(key, None)
    _pending.pop(key, None)
    _DESTROYED.value += 1


def set_eager_runner(runner: Callable[[ir.Node], list] | None) -> None:
    """Run every pending value at once with `runner(node)` (eager mode), or never (None)."""
    global _run_now, _last_run
    _run_now, _last_run = runner, None


def is_eager() -> bool:
    return _run_now is not None


def eager_value(node: ir.Node, index: int) -> tuple[ir.Node, int]:
    """Output `index` of `node` as a tensor should hold it: computed now in eager mode."""
    global _last_run
    if _run_now is None or node.rule is None:
        return node, index
    last = _last_run
    if last is not None and last[0] is node:
        outputs = last[1]
    else:
        outputs = _run_now(node)
        _last_run = (node, outputs)
    return outputs[index], 0


def device_index(device: Any) -> int:
    """The index of XLA device `device`; `xla` without one (or None) is the calling
    thread's current device (xla:0 unless the thread chose another)."""
    index = None if device is None else torch.device(device).index
    return threads.current_index() if index is None else index


def torch_device(index: int) -> torch.device:
    return _DEVICES[index]


class XLATensor(torch.Tensor):
    """Holds output `_index` of IR node `_node` (device data once computed)."""

    __slots__ = ("_node", "_index", "_ref")  # set for every recorded op: slots are cheaper
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, node: ir.Node, index: int = 0, stride: tuple | None = None,
                offset: int | None = None):
        if _inference_mode_enabled():
            # A tensor made under `torch.inference_mode()` would be an inference tensor,
            # which has no version counter, and functionalization gives every view of a
            # tensor its base's: a view of a parameter in inference mode failed with
            # "Cannot set version_counter for inference tensor". Engine tensors are never
            # inference tensors, so what the user holds behaves as a no_grad result.
            with torch.inference_mode(False):
                return XLATensor.__new__(cls, node, index, stride, offset)
        shape, dtype = node.avals[index]
        # positional (size, strides, storage_offset, memory_format, dtype, layout, device):
        # torch parses them about 0.8 us faster than keywords, on every recorded op. A
        # view's engine tensor has its CPU strides (`layout.py`); the rest are contiguous.
        t = _make_wrapper_subclass(cls, shape, stride, offset, None, dtype, _STRIDED,
                                   _DEVICES[node.device])
        if _run_now is not None and node.rule is not None:
            node, index = eager_value(node, index)
        t._node = node
        t._index = index
        t._ref = ref = _weakref(t, _on_destroy)
        key = id(ref)
        _live[key] = ref
        if node.rule is not None:
            _pending[key] = ref
        _CREATED.value += 1
        return t

    def _set(self, node: ir.Node, index: int = 0) -> None:
        """Point this tensor at another value of the same shape and dtype."""
        if node.rule is not None and _run_now is not None:
            node, index = eager_value(node, index)
        self._node, self._index = node, index
        if node.rule is not None:
            _pending[id(self._ref)] = self._ref

    @property
    def value(self) -> tuple[ir.Node, int]:
        return self._node, self._index

    def __repr__(self) -> str:
        return f"XLATensor({self._node.op}, shape={tuple(self.shape)}, dtype={self.dtype})"

    def refused(self) -> RuntimeError:
        """The error for an op that cannot take this tensor. Only the engine's special
        forms (subclasses, such as `nested.NestedTensor`) reach an op that refuses them."""
        return RuntimeError(f"{type(self).__name__} cannot be an argument of this op")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatcher(func, args, kwargs or {})


# `new_tensor(XLATensor, node, index)` is `XLATensor(node, index)` without `type.__call__`
# finding `__new__` again on every call: the recorder makes one per op.
new_tensor = XLATensor.__new__


def _no_dispatcher(func, args, kwargs) -> Any:
    raise RuntimeError(f"{func} reached an XLA tensor before the engine was loaded "
                       "(import torch_xla.lazy)")


_dispatcher: Callable[[Any, tuple, dict], Any] = _no_dispatcher


def set_dispatcher(handler: Callable[[Any, tuple, dict], Any]) -> None:
    """Route every ATen op on an XLA tensor to `handler(func, args, kwargs)`."""
    global _dispatcher
    _dispatcher = handler


def not_xla_error(t: torch.Tensor) -> RuntimeError:
    if isinstance(t, XLATensor):  # a special form, which only its own rules take
        return t.refused()
    return RuntimeError(
        f"Input tensor is not an XLA tensor: {t.type()} on {t.device} with shape "
        f"{tuple(t.shape)}. Move it to the XLA device first, e.g. `t.to(xm.xla_device())`."
    )


def device_mismatch_error(expected: int, found: int) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors on the same device, found xla:{expected} and xla:{found}. "
        "Move one with `.to(...)`."
    )


def common_device(tensors: Sequence[torch.Tensor]) -> int | None:
    """The index of the one XLA device `tensors` (torch tensors) are on (None for none);
    a CPU tensor or a second device raises the errors above."""
    found = None
    for t in tensors:
        if t.device.type != "xla":
            raise not_xla_error(t)
        if found is not None and t.device.index != found:
            raise device_mismatch_error(found, t.device.index)
        found = t.device.index
    return found


def uninitialized(t: XLATensor) -> XLATensor:
    """`t`, a new tensor of unspecified content (`torch.empty`), left out of syncs.

    No step needs to compute it (a graph that reads it computes it). `x.to(device)` makes
    one for a moment before filling it, and when a data loader's thread does that while
    the main thread syncs, the half-made tensor would land in that step's graph: in one
    process and not another, whose replicated programs would then differ.
    """
    _pending.pop(id(t._ref), None)
    return t


def pending_tensors() -> list[XLATensor]:
    """Live tensors whose value is still IR, in creation order."""
    found = []
    for key, ref in list(_pending.items()):
        t = ref()
        if t is None or t._node.rule is None:
            _pending.pop(key, None)
        else:
            found.append(t)
    return found


def live_tensors() -> list[XLATensor]:
    return [t for t in (ref() for ref in list(_live.values())) if t is not None]


def forget_pending() -> None:
    _pending.clear()


def take_pending(device: int) -> list[XLATensor]:
    """The live tensors on `device` whose value is still IR, in creation order; forgets
    them (a thread driving one device syncs only its own)."""
    found = []
    for key, ref in list(_pending.items()):
        t = ref()
        if t is None or t._node.rule is None:
            _pending.pop(key, None)
        elif t._node.device == device:
            _pending.pop(key, None)
            found.append(t)
    return found
