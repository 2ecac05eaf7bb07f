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

import numpy as np
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


def _extent(size: tuple, stride: tuple, offset: int) -> int:
    """The elements of storage a tensor laid out as (size, stride, offset) reaches into
    (0 for an empty one)."""
    if any(n == 0 for n in size):
        return 0
    return offset + 1 + sum((n - 1) * s for n, s in zip(size, stride, strict=True))


def _meta(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with `t`'s sizes, strides and storage offset."""
    stride, offset = t.stride(), t.storage_offset()
    if offset == 0:
        return torch.empty_strided(t.shape, stride, dtype=t.dtype, device="meta")
    storage = torch.empty(_extent(tuple(t.shape), stride, offset), dtype=t.dtype, device="meta")
    return storage.as_strided(t.shape, stride, offset)


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


def storage_gather(t: torch.Tensor, size: tuple, stride: tuple, offset: int | None,
                   scatter: bool = False) -> np.ndarray:
    """For each element of `t.as_strided(size, stride, offset)` on the CPU, the index in
    `t`'s value (flat, row-major) of the element of `t` at that storage location; with
    `scatter`, the same for `as_strided_scatter(t, src, size, stride, offset)`, which
    indexes a clone of `t` (its layout, or a contiguous one, from storage offset 0).

    The engine keeps a view's elements, not its base's storage: the CPU reads storage,
    so a location no element of `t` lays on cannot be read here, and is refused."""
    shape = tuple(t.shape)
    laid_out = _meta(t).clone() if scatter else t
    t_stride, t_offset = laid_out.stride(), laid_out.storage_offset()
    held = _positions(shape, t_stride, t_offset).reshape(-1)
    wanted = _positions(tuple(size), tuple(stride), t_offset if offset is None else offset)
    if held.size == 0 or wanted.size == 0:
        return np.zeros(wanted.shape, dtype=np.int64)
    low = int(held.min())
    lookup = np.full(int(held.max()) - low + 1, -1, dtype=np.int64)
    lookup[held - low] = np.arange(held.size)
    inside = (wanted >= low) & (wanted - low < lookup.size)
    found = np.where(inside, lookup[np.clip(wanted - low, 0, lookup.size - 1)], -1)
    if (found < 0).any():
        raise RuntimeError(
            f"as_strided(size={list(size)}, stride={list(stride)}, storage_offset={offset}) "
            f"on a view of an XLA tensor (size {list(shape)}, stride {list(t_stride)}, "
            f"storage offset {t_offset}) reads storage the view does not cover: the device "
            "holds a view's elements, not its base's memory. Call as_strided on the base "
            "tensor instead.")
    return found


def check_as_strided(t: torch.Tensor, size: tuple, stride: tuple, offset: int | None) -> None:
    """The CPU's checks of `as_strided` on `t` with a fresh tensor's layout (its storage is
    its elements), in its words: a location outside them would be read from the wrong
    element (XLA clamps indices) instead of refused."""
    if any(s < 0 for s in stride):
        raise RuntimeError("as_strided: Negative strides are not supported at the moment, "
                           f"got strides: {list(stride)}")
    offset = t.storage_offset() if offset is None else offset
    itemsize = t.element_size()
    needed = _extent(size, stride, offset) * itemsize
    if needed > t.numel() * itemsize:
        raise RuntimeError(
            f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, "
            f"and itemsize {itemsize} requiring a storage size of {needed} are out of bounds "
            f"for storage of size {t.numel() * itemsize}")


def _positions(size: tuple, stride: tuple, offset: int) -> np.ndarray:
    """The storage location of each element of a tensor laid out as (size, stride, offset)."""
    index = np.full(size, offset, dtype=np.int64)
    for axis, (n, s) in enumerate(zip(size, stride, strict=True)):
        shape = [1] * len(size)
        shape[axis] = n
        index = index + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return index
