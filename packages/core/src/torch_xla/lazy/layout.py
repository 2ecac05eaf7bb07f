"""The strides and storage offset a view of an XLA tensor reports: the CPU's.

An engine tensor's value is an array in logical order; strides are metadata nobody
reads to find an element. Functionalization gives a view of a user's tensor the sizes,
strides and storage offset of the engine tensor inside it, the result of the view's
`*_copy` op. If those were always contiguous, `x.t().is_contiguous()` would be True, so
`x.t().contiguous()` and `x.t().reshape(-1)` would return views of `x` where the CPU
returns copies: an in-place op on the result would then change `x` as well. So the
engine gives each view-copy result the layout the view has on the CPU, computed by
running the view on a meta tensor of the input's layout (once per op, input layout and
arguments; a dictionary lookup after that). With those strides an in-place op on a view
whose elements overlap (`x.expand(3, 4).add_(1)`) is refused as on the CPU
(`backend/in_place.py`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._ops import OpOverload

aten = torch.ops.aten

# Each view-copy op functionalization calls on engine tensors -> the view it copies.
VIEWS: dict[OpOverload, OpOverload] = {
    aten.view_copy.default: aten.view.default,
    aten.view_copy.dtype: aten.view.dtype,
    aten._reshape_alias_copy.default: aten._reshape_alias.default,
    aten.alias_copy.default: aten.alias.default,
    aten.detach_copy.default: aten.detach.default,
    aten.transpose_copy.int: aten.transpose.int,
    aten.t_copy.default: aten.t.default,
    aten.permute_copy.default: aten.permute.default,
    aten.expand_copy.default: aten.expand.default,
    aten.select_copy.int: aten.select.int,
    aten.slice_copy.Tensor: aten.slice.Tensor,
    aten.squeeze_copy.default: aten.squeeze.default,
    aten.squeeze_copy.dim: aten.squeeze.dim,
    aten.squeeze_copy.dims: aten.squeeze.dims,
    aten.unsqueeze_copy.default: aten.unsqueeze.default,
    aten.diagonal_copy.default: aten.diagonal.default,
    aten.unfold_copy.default: aten.unfold.default,
    aten.as_strided_copy.default: aten.as_strided.default,
    aten.split_copy.Tensor: aten.split.Tensor,
    aten.split_with_sizes_copy.default: aten.split_with_sizes.default,
    aten.unbind_copy.int: aten.unbind.int,
    aten.view_as_real_copy.default: aten.view_as_real.default,
    aten.view_as_complex_copy.default: aten.view_as_complex.default,
}

# Views whose result is contiguous, offset 0, when their input is: no meta run needed.
_CONTIGUOUS_OF_CONTIGUOUS = frozenset({
    aten.view_copy.default, aten.alias_copy.default, aten.detach_copy.default,
    aten.squeeze_copy.default, aten.squeeze_copy.dim, aten.squeeze_copy.dims,
    aten.unsqueeze_copy.default,
})

Layout = tuple[tuple[int, ...], int]  # (strides, storage offset)


def is_plain(t: torch.Tensor) -> bool:
    """Whether `t` reports the layout of a fresh tensor (contiguous, offset 0)."""
    return t.storage_offset() == 0 and t.is_contiguous()


def _meta(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with `t`'s sizes, strides and storage offset."""
    stride, offset = t.stride(), t.storage_offset()
    if offset == 0:
        return torch.empty_strided(t.shape, stride, dtype=t.dtype, device="meta")
    extent = offset + 1 + sum((n - 1) * s for n, s in zip(t.shape, stride, strict=True) if n)
    return torch.empty(extent, dtype=t.dtype, device="meta").as_strided(t.shape, stride, offset)


# (view-copy op, input sizes, strides, offset, other arguments) -> `of_view`'s answer: a
# training step makes the same views every step, and the meta run costs about 5 us.
_cache: dict[tuple, list[Layout | None] | None] = {}
_CACHE_LIMIT = 10_000


def of_view(func: OpOverload, args: tuple, kwargs: dict) -> list[Layout | None] | None:
    """The CPU's layout of each output of view-copy op `func` on `args` (None: plain), or
    None when every output is plain."""
    x = args[0]
    stride, offset = x.stride(), x.storage_offset()
    if func in _CONTIGUOUS_OF_CONTIGUOUS and offset == 0 and x.is_contiguous():
        return None
    key = (func, x.shape, stride, offset, *args[1:], *kwargs.items())
    try:
        return _cache[key]
    except KeyError:
        pass
    except TypeError:  # a list argument (permute's dims, expand's sizes)
        key = (func, x.shape, stride, offset, *_hashable(args[1:]), *_hashable(kwargs.items()))
        if key in _cache:
            return _cache[key]
    found = _layouts(func, x, args, kwargs)
    if len(_cache) >= _CACHE_LIMIT:
        _cache.clear()
    _cache[key] = found
    return found


def _hashable(items) -> tuple:
    return tuple(_hashable(a) if isinstance(a, (list, tuple)) else a for a in items)


def _layouts(func: OpOverload, x: torch.Tensor, args: tuple,
             kwargs: dict) -> list[Layout | None] | None:
    try:
        out = VIEWS[func](_meta(x), *args[1:], **kwargs)
    except RuntimeError:
        # a view the CPU refuses for this layout (`x.t().view(-1)`), which the engine
        # allows as PyTorch/XLA does: its result is a fresh tensor's layout
        return None
    outs = out if isinstance(out, (list, tuple)) else (out,)
    found = [None if is_plain(o) else (o.stride(), o.storage_offset()) for o in outs]
    return None if all(f is None for f in found) else found


def same_as(t: torch.Tensor) -> tuple[Any, ...]:
    """The layout arguments of a tensor that views all of `t` as it is (an alias)."""
    return () if is_plain(t) else (t.stride(), t.storage_offset())
