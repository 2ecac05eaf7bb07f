"""Views and data movement: reshape, transpose, slicing, concatenation, scatter-back of views.

Functionalization sends both the view ops and their `*_copy` twins; on arrays they are
the same function.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from torch_xla.lowering import dtypes
from torch_xla.lowering.ops._common import aten, canon_dim, int_list, to_array
from torch_xla.lowering.registry import register


def _infer_size(size, numel: int) -> tuple[int, ...]:
    size = int_list(size)
    if -1 in size:
        known = int(np.prod([s for s in size if s != -1]))
        size[size.index(-1)] = numel // known if known else 0
    return tuple(size)


@register(aten.view.default, aten.view_copy.default, aten._unsafe_view.default,
          aten.reshape.default, aten._reshape_copy.default)
def view(x, size):
    return jnp.reshape(x, _infer_size(size, x.size))


@register(aten._reshape_alias.default, aten._reshape_alias_copy.default)
def reshape_alias(x, size, stride):
    return jnp.reshape(x, _infer_size(size, x.size))


@register(aten.view.dtype, aten.view_copy.dtype)
def view_dtype(x, dtype):
    target = dtypes.to_jax(dtype)
    if target.itemsize == x.dtype.itemsize:
        return lax.bitcast_convert_type(x, target)
    if target.itemsize < x.dtype.itemsize:
        out = lax.bitcast_convert_type(x, target)
        return out.reshape(*x.shape[:-1], -1)
    ratio = target.itemsize // x.dtype.itemsize
    grouped = x.reshape(*x.shape[:-1], x.shape[-1] // ratio, ratio)
    return lax.bitcast_convert_type(grouped, target)


@register(aten.alias.default, aten.alias_copy.default, aten.detach.default,
          aten.detach_copy.default, aten.lift_fresh.default, aten.lift_fresh_copy.default,
          aten.lift.default)
def alias(x):
    return x


@register(aten.clone.default)
def clone(x, *, memory_format=None):
    return x


@register(aten.t.default, aten.t_copy.default, aten.numpy_T.default)
def t(x):
    return x.T if x.ndim == 2 else x


@register(aten.transpose.int, aten.transpose_copy.int)
def transpose(x, dim0, dim1):
    if x.ndim == 0:
        return x
    return jnp.swapaxes(x, canon_dim(dim0, x.ndim), canon_dim(dim1, x.ndim))


@register(aten.permute.default, aten.permute_copy.default)
def permute(x, dims):
    return jnp.transpose(x, [canon_dim(d, x.ndim) for d in dims]) if x.ndim else x


@register(aten.expand.default, aten.expand_copy.default)
def expand(x, size, *, implicit=False):
    size = int_list(size)
    lead = len(size) - x.ndim
    shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return jnp.broadcast_to(x, shape)


def _slice_bounds(length: int, start, end, step=1) -> tuple[int, int]:
    start = 0 if start is None else start
    end = length if end is None else end
    if start < 0:
        start += length
    if end < 0:
        end += length
    start = min(max(start, 0), length)
    end = min(max(end, start), length)
    return start, end


@register(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(x, dim=0, start=None, end=None, step=1):
    axis = canon_dim(dim, x.ndim)
    start, end = _slice_bounds(x.shape[axis], start, end)
    return lax.slice_in_dim(x, start, end, step, axis)


@register(aten.select.int, aten.select_copy.int)
def select(x, dim, index):
    axis = canon_dim(dim, x.ndim)
    return lax.index_in_dim(x, index % x.shape[axis], axis, keepdims=False)


@register(aten.narrow.default, aten.narrow_copy.default)
def narrow(x, dim, start, length):
    axis = canon_dim(dim, x.ndim)
    start = start % x.shape[axis] if start < 0 else start
    return lax.slice_in_dim(x, start, start + length, 1, axis)


@register(aten.squeeze.default, aten.squeeze_copy.default)
def squeeze(x):
    return jnp.squeeze(x)


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze_copy.dim, aten.squeeze_copy.dims)
def squeeze_dims(x, dim):
    if x.ndim == 0:
        return x
    axes = {canon_dim(d, x.ndim) for d in int_list(dim)}
    return jnp.squeeze(x, tuple(a for a in sorted(axes) if x.shape[a] == 1))


@register(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def unsqueeze(x, dim):
    return jnp.expand_dims(x, canon_dim(dim, x.ndim + 1))


@register(aten.diagonal.default, aten.diagonal_copy.default)
def diagonal(x, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(x, offset, canon_dim(dim1, x.ndim), canon_dim(dim2, x.ndim))


@register(aten.unfold.default, aten.unfold_copy.default)
def unfold(x, dimension, size, step):
    if x.ndim == 0:
        return x.reshape(1)
    axis = canon_dim(dimension, x.ndim)
    count = (x.shape[axis] - size) // step + 1
    windows = np.arange(count)[:, None] * step + np.arange(size)[None, :]
    taken = jnp.take(x, windows, axis=axis)  # (..., count, size, ...)
    return jnp.moveaxis(taken, axis + 1, -1)


def _strided_indices(size, stride, storage_offset) -> np.ndarray:
    index = np.full(tuple(size), storage_offset or 0, dtype=np.int64)
    for axis, (n, s) in enumerate(zip(size, stride, strict=False)):
        shape = [1] * len(size)
        shape[axis] = n
        index = index + (np.arange(n) * s).reshape(shape)
    return index


@register(aten.as_strided.default, aten.as_strided_copy.default)
def as_strided(x, size, stride, storage_offset=None):
    # The input is the tensor's value in row-major order; strides index into it.
    return x.reshape(-1)[_strided_indices(size, stride, storage_offset)]


@register(aten.as_strided_scatter.default)
def as_strided_scatter(x, src, size, stride, storage_offset=None):
    index = _strided_indices(size, stride, storage_offset)
    flat = x.reshape(-1).at[index.reshape(-1)].set(src.reshape(-1).astype(x.dtype))
    return flat.reshape(x.shape)


@register(aten.split.Tensor, aten.split_copy.Tensor)
def split(x, split_size, dim=0):
    axis = canon_dim(dim, x.ndim)
    length = x.shape[axis]
    if split_size == 0:
        return [x]
    starts = list(range(0, length, split_size)) or [0]
    return [lax.slice_in_dim(x, s, min(s + split_size, length), 1, axis) for s in starts]


@register(aten.split_with_sizes.default, aten.split_with_sizes_copy.default,
          aten.split.sizes)
def split_with_sizes(x, split_sizes, dim=0):
    axis = canon_dim(dim, x.ndim)
    offsets = np.cumsum([0, *split_sizes])
    bounds = zip(offsets[:-1], offsets[1:], strict=True)
    return [lax.slice_in_dim(x, int(a), int(b), 1, axis) for a, b in bounds]


@register(aten.unbind.int, aten.unbind_copy.int)
def unbind(x, dim=0):
    axis = canon_dim(dim, x.ndim)
    return [lax.index_in_dim(x, i, axis, keepdims=False) for i in range(x.shape[axis])]


@register(aten.chunk.default)
def chunk(x, chunks, dim=0):
    axis = canon_dim(dim, x.ndim)
    return split(x, -(-x.shape[axis] // chunks) if x.shape[axis] else 1, axis)


def _legacy_empty(x) -> bool:
    # torch.cat skips 1-D empty tensors whatever the other inputs' shapes.
    return x.ndim == 1 and x.shape[0] == 0


@register(aten.cat.default, aten.concat.default, aten.concatenate.default)
def cat(tensors, dim=0):
    dtype = dtypes.result_type(*[t for t in tensors if t.ndim > 0] or tensors)
    kept = [t for t in tensors if not _legacy_empty(t)]
    if not kept:
        return to_array(tensors[0], dtype)
    axis = canon_dim(dim, kept[0].ndim)
    return jnp.concatenate([t.astype(dtype) for t in kept], axis=axis)


@register(aten.stack.default)
def stack(tensors, dim=0):
    dtype = dtypes.result_type(*tensors)
    axis = canon_dim(dim, tensors[0].ndim + 1)
    return jnp.stack([t.astype(dtype) for t in tensors], axis=axis)


@register(aten.hstack.default)
def hstack(tensors):
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


@register(aten.flip.default)
def flip(x, dims):
    if x.ndim == 0:
        return x
    return jnp.flip(x, [canon_dim(d, x.ndim) for d in dims])


@register(aten.roll.default)
def roll(x, shifts, dims=()):
    shifts, dims = int_list(shifts), int_list(dims)
    if not dims:
        return jnp.roll(x.reshape(-1), shifts[0]).reshape(x.shape)
    return jnp.roll(x, shifts, [canon_dim(d, x.ndim) for d in dims])


@register(aten.repeat.default)
def repeat(x, repeats):
    repeats = int_list(repeats)
    x = x.reshape((1,) * (len(repeats) - x.ndim) + x.shape)
    return jnp.tile(x, repeats)


@register(aten.repeat_interleave.self_int)
def repeat_interleave(x, repeats, dim=None, *, output_size=None):
    if dim is None:
        return jnp.repeat(x.reshape(-1), repeats)
    return jnp.repeat(x, repeats, axis=canon_dim(dim, x.ndim))


@register(aten.tril.default)
def tril(x, diagonal=0):
    return jnp.tril(x, diagonal)


@register(aten.triu.default)
def triu(x, diagonal=0):
    return jnp.triu(x, diagonal)


@register(aten.select_scatter.default)
def select_scatter(x, src, dim, index):
    axis = canon_dim(dim, x.ndim)
    where = [slice(None)] * x.ndim
    where[axis] = index % x.shape[axis]
    return x.at[tuple(where)].set(src.astype(x.dtype))


@register(aten.slice_scatter.default)
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    axis = canon_dim(dim, x.ndim)
    start, end = _slice_bounds(x.shape[axis], start, end)
    where = [slice(None)] * x.ndim
    where[axis] = slice(start, end, step)
    return x.at[tuple(where)].set(src.astype(x.dtype))


@register(aten.diagonal_scatter.default)
def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    d1, d2 = canon_dim(dim1, x.ndim), canon_dim(dim2, x.ndim)
    rows, cols = x.shape[d1], x.shape[d2]
    n = max(0, min(rows + min(offset, 0), cols - max(offset, 0)))
    i = np.arange(n) - min(offset, 0)
    j = np.arange(n) + max(offset, 0)
    moved = jnp.moveaxis(x, (d1, d2), (-2, -1))
    moved = moved.at[..., i, j].set(src.astype(x.dtype))
    return jnp.moveaxis(moved, (-2, -1), (d1, d2))


@register(aten.select_backward.default)
def select_backward(grad, input_sizes, dim, index):
    return select_scatter(jnp.zeros(tuple(input_sizes), grad.dtype), grad, dim, index)


@register(aten.slice_backward.default)
def slice_backward(grad, input_sizes, dim, start, end, step):
    return slice_scatter(jnp.zeros(tuple(input_sizes), grad.dtype), grad, dim, start, end, step)


@register(aten.diagonal_backward.default)
def diagonal_backward(grad, input_sizes, offset, dim1, dim2):
    zeros = jnp.zeros(tuple(input_sizes), grad.dtype)
    return diagonal_scatter(zeros, grad, offset, dim1, dim2)


@register(aten.unfold_backward.default)
def unfold_backward(grad, input_sizes, dim, size, step):
    if len(input_sizes) == 0:  # a 0-d input unfolds to its one value
        return grad.reshape(())
    axis = canon_dim(dim, len(input_sizes))
    count = grad.shape[axis]
    windows = np.arange(count)[:, None] * step + np.arange(size)[None, :]
    moved = jnp.moveaxis(grad, (axis, grad.ndim - 1), (0, 1))  # (count, size, ...)
    zeros = jnp.zeros((input_sizes[axis],) + moved.shape[2:], grad.dtype)
    summed = zeros.at[windows.reshape(-1)].add(moved.reshape((-1,) + moved.shape[2:]))
    return jnp.moveaxis(summed, 0, axis)


@register(aten.view_as_real.default, aten.view_as_real_copy.default)
def view_as_real(x):
    return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)


@register(aten.view_as_complex.default, aten.view_as_complex_copy.default)
def view_as_complex(x):
    return lax.complex(x[..., 0], x[..., 1])


@register(aten.movedim.int)
def movedim(x, source, destination):
    return jnp.moveaxis(x, canon_dim(source, x.ndim), canon_dim(destination, x.ndim))


@register(aten._neg_view.default, aten._neg_view_copy.default)
def neg_view(x):
    return -x


@register(aten.slice_inverse.default)
def slice_inverse(x, src, dim=0, start=None, end=None, step=1):
    # The base that `x` is a slice of: src with x written into the slice.
    return slice_scatter(src, x, dim, start, end, step)


@register(aten._stack.default)
def stack_private(tensors, dim=0):
    return stack(tensors, dim)
