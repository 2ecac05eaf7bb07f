"""Rules that rewrite an op into others the engine already handles.

- `inplace_as_functional`: `x.op_(...)` called by a decomposition (below
  functionalization) becomes `x <- op(x, ...)`.
- `foreach_as_loop`: `_foreach_op(lists...)` becomes one `op` per list element.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._ops import OpOverload

from torch_xla.lazy import nodes

aten = torch.ops.aten


def inplace_as_functional(func: OpOverload) -> Callable | None:
    """`x.op_(...)` as `x <- op(x, ...)`, or None when `func` writes to anything else.

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
        a[0]._set(*nodes.convert(out, a[0].shape, a[0].dtype).value)
        return a[0]

    return run


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
