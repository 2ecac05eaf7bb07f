"""The torch._decomp decompositions the engine applies to ops with no native lowering.

Source order: PyTorch's Core ATen decompositions (`core_aten_decompositions()`, the set
torch.export uses), then any other entry of `torch._decomp.decomposition_table` for ops
that still have neither. Ops we lower natively are left out, so a native lowering always
wins over a decomposition.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from torch._ops import OpOverload

from torch_xla.lowering.registry import lookup

# Decompositions we never apply, with the reason.
EXCLUDED: dict[str, str] = {
    # Data-dependent output shapes: these need the CPU fallback, not a rewrite.
    "aten.nonzero.default": "data-dependent output shape",
    "aten.masked_select.default": "data-dependent output shape",
    # torch's decomposition calls .item() / Python control flow on values.
    "aten._local_scalar_dense.default": "is the host read itself",
}


@functools.cache
def _torch_table() -> dict[OpOverload, Callable]:
    import torch._decomp as decomp

    table = dict(decomp.core_aten_decompositions())
    for op, fn in decomp.decomposition_table.items():
        if isinstance(op, OpOverload):
            table.setdefault(op, fn)
    return {op: fn for op, fn in table.items() if str(op) not in EXCLUDED}


def decompositions() -> dict[OpOverload, Callable]:
    """{overload: decomposition} for every overload without a native lowering.

    Computed from the current lowering table on each call, so a lowering registered later
    takes precedence; the torch side is built once.
    """
    return {op: fn for op, fn in _torch_table().items() if lookup(op) is None}


def decomposition_for(op: OpOverload) -> Callable | None:
    """The decomposition the engine should apply to `op`, or None."""
    if lookup(op) is not None:
        return None
    return _torch_table().get(op)
