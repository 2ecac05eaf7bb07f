"""The functionalization wrapper every user-visible XLA tensor lives in.

PyTorch's `FunctionalTensorWrapper` (the C++ class PyTorch/XLA uses too) turns
views and in-place ops into functional ops before they reach `XLATensor`, and
writes results back to every alias, so the engine only ever records pure ops.
"""

from __future__ import annotations

import sys

import torch
from torch.utils import _pytree as pytree

from torch_xla import _metrics
from torch_xla.lazy.tensor import XLATensor

_FUNCTIONALIZE = torch._C.DispatchKey.Functionalize


def inside_functionalization() -> bool:
    """True when called under a functionalization kernel, which wraps results itself."""
    return torch._C._dispatch_tls_is_dispatch_key_excluded(_FUNCTIONALIZE)


def wrap(inner: XLATensor) -> torch.Tensor:
    """The user-visible tensor for a fresh engine tensor."""
    if inside_functionalization():
        return inner
    return torch._to_functional_tensor(inner)


def lift_fresh(inner: XLATensor) -> torch.Tensor:
    """The result of `torch.tensor(data, device=xla)` (ATen's `lift_fresh`, which PyTorch/XLA
    implements the same way): a user tensor, so that writes through its views work.

    A `torch.tensor` inside a decomposition that the engine is running stays an engine
    tensor. No dispatch-key state tells the two apart, so we look for an engine op further
    up the stack."""
    return inner if _engine_ops_on_stack() > 1 else torch._to_functional_tensor(inner)


_DISPATCH_CODE = XLATensor.__torch_dispatch__.__func__.__code__


def _engine_ops_on_stack() -> int:
    count, frame = 0, sys._getframe(1)
    while frame is not None:
        count += frame.f_code is _DISPATCH_CODE
        frame = frame.f_back
    return count


def unwrap(t: torch.Tensor) -> XLATensor:
    """The engine tensor holding `t`'s current value (pending view updates applied)."""
    if type(t) is XLATensor:
        return t
    if not torch._is_functional_tensor(t):
        raise TypeError(f"expected an XLA tensor, got a {t.type()} on {t.device}")
    torch._sync(t)
    inner = torch._from_functional_tensor(t)
    if type(inner) is not XLATensor:
        raise TypeError(
            f"expected an XLA tensor, got a functional {inner.type()} on {inner.device}"
        )
    return inner


_COPIES = _metrics.counter("xla::copy")  # the count `aten.copy`'s engine rule keeps


def copied_value(dst: torch.Tensor, src: torch.Tensor) -> XLATensor | None:
    """For `dst.copy_(src)` between two user tensors of one shape, dtype and device: a
    fresh engine tensor holding `src`'s current value, for the caller to write into `dst`
    (`backend/in_place.write_back`); None unless both hold engine tensors (under
    AOTAutograd's tracing they hold fake tensors), leaving the copy to PyTorch's kernel.

    This is PyTorch's functionalization kernel of `copy_` without its meta-tensor check
    (nothing to broadcast or cast) and its dispatch of `aten.copy` back into the engine:
    the copy AOTAutograd makes into every input a compiled graph mutated."""
    torch._functionalize_sync(src)
    value = torch._from_functional_tensor(src)
    if type(value) is not XLATensor or type(torch._from_functional_tensor(dst)) is not XLATensor:
        return None
    _COPIES.value += 1
    return XLATensor(*value.value)


def _to_functional(a):
    return torch._to_functional_tensor(a) if type(a) is XLATensor else a


def _from_functional(a):
    if isinstance(a, torch.Tensor) and torch._is_functional_tensor(a):
        return unwrap(a)
    return a


def decomposed(decomposition, args: tuple, kwargs: dict):
    """`decomposition(*args, **kwargs)` on engine tensors, run under functionalization;
    its results as engine tensors.

    A decomposition the engine applies (an op's composite kernel, or torch's Python
    decomposition of it) may write through views (`pad_packed_sequence`, `vander` and
    `stft` do), and engine tensors, being values, would silently drop such writes. Ops
    reach the engine undecomposed when autograd is skipped (`torch.inference_mode` sends
    them through functionalization's fallback). Wrapped again, the decomposition's views
    and in-place ops are functionalized like the user's own."""
    fargs = pytree.tree_map(_to_functional, args)
    fkwargs = pytree.tree_map(_to_functional, kwargs)
    with torch._C._SetExcludeDispatchKeyGuard(_FUNCTIONALIZE, False):
        out = decomposition(*fargs, **fkwargs)
    return pytree.tree_map(_from_functional, out)
