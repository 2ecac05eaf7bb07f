"""PyTorch operations written with the XLA-builder API (PyTorch/XLA's `xor`).

    import torch_xla.core.xla_builder as xb
    import torch_xla.core.xla_op_registry as xor

    def slice_and_add(a, b, dimno=0):           # a, b: xb.Op
        sa = a.slice_in_dim(start_index=0, limit_index=1, dimno=dimno)
        sb = b.slice_in_dim(start_index=1, limit_index=2, dimno=dimno)
        return sa + sb

    SLICE_AND_ADD = xor.register('slice_and_add', slice_and_add)
    z = SLICE_AND_ADD(x, y, dimno=0)            # x, y: XLA tensors; z: an XLA tensor

Each call records one node of the lazy graph, like any op. The computation is made
once per signature (the arguments' shapes and stored dtypes, and the keyword
arguments, which must be picklable Python values) and kept on the `Op`; with
`XLA_OP_PRINT_COMPUTATIONS=1` each new one's HLO is printed to stderr. A tuple
result comes back as a list of tensors, a single one as a tensor. The op is not
differentiable; wrap it in a `torch.autograd.Function` for a backward.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from typing import Any

import torch

from torch_xla.core import xla_builder as xb


class Op:
    """A PyTorch operation on XLA tensors whose lowering is `opfn`, a function over
    `xb.Op`s (see the module)."""

    def __init__(self, name: str, opfn: Callable) -> None:
        if not callable(opfn):
            raise TypeError(f"xor.register({name!r}, ...): the lowering must be a function "
                            f"over xb.Op values, got {type(opfn).__name__}")
        self._name = name
        self._opfn = opfn
        self._opname = "xla::_op_" + name
        self._lock = threading.Lock()
        self._computations: dict[bytes, xb.Computation] = {}

    def __call__(self, *args: torch.Tensor, **kwargs: Any) -> Any:
        shapes = xb.tensor_shape(args)
        try:
            key = pickle.dumps([[s.shape for s in shapes], kwargs])
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            raise TypeError(f"{self._name}: keyword arguments must be picklable Python values "
                            f"(they select the computation), got {kwargs!r}: {error}") from None
        with self._lock:
            computation = self._computations.get(key)
            if computation is None:
                computation = xb.create_computation(self._name, self._opfn, shapes, **kwargs)
                self._computations[key] = computation
                xb.print_computation(computation)
        result = xb.user_computation(self._opname, args, computation)
        return result[0] if len(result) == 1 else result

    def __repr__(self) -> str:
        return f"xor.Op({self._name!r})"


def register(name: str, opfn: Callable) -> Op:
    """A PyTorch operation named `name` on XLA tensors, lowered by `opfn` (a function over
    `xb.Op`s; keyword arguments reach it as Python values). Register it once, at module
    level: its computations are kept per signature."""
    return Op(name, opfn)
