"""Max, average and adaptive pooling (1-3 spatial dims), max_unpool, with their backward
ops. Max pooling returns torch's first-max flat indices, which its backward scatters to."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from torch_xla.lowering import dtypes
from torch_xla.lowering.ops._common import HIGHEST, aten, expand_param, int_list, upcast
from torch_xla.lowering.registry import register


def _pool_geometry(x, kernel, stride, padding, dilation, ceil_mode, n):
    kernel = expand_param(kernel, n)
    stride = expand_param(stride, n) if stride else kernel
    padding = expand_param(padding, n)
    dilation = expand_param(dilation, n)
    sizes = x.shape[-n:]
    outs = []
    for size, k, s, p, d in zip(sizes, kernel, stride, padding, dilation, strict=False):
        span = size + 2 * p - d * (k - 1) - 1
        out = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (out - 1) * s >= size + p:
            out -= 1  # the last window must start inside the input or left padding
        outs.append(out)
    return kernel, stride, padding, dilation, outs


def _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, n):
    kernel, stride, padding, dilation, outs = _pool_geometry(
        x, kernel_size, stride, padding, dilation, ceil_mode, n)
    batch = x.shape[:-n]
    sizes = x.shape[-n:]
    flat_index = jnp.arange(int(np.prod(sizes)), dtype=np.int64).reshape(sizes)
    flat_index = jnp.broadcast_to(flat_index, x.shape)
    pads = [(0, 0)] * len(batch)
    for size, k, s, p, d, o in zip(sizes, kernel, stride, padding, dilation, outs, strict=False):
        high = max((o - 1) * s + d * (k - 1) + 1 - size - p, 0)
        pads.append((p, high))
    low = jnp.asarray(-jnp.inf if dtypes.is_floating(x.dtype) else (
        jnp.iinfo(x.dtype).min if x.dtype != np.bool_ else False), x.dtype)
    xp = jnp.pad(x, pads, constant_values=low)
    ip = jnp.pad(flat_index, pads, constant_values=-1)
    best = best_index = None
    # Visit kernel offsets in order; a later element wins only if strictly greater or NaN,
    # which gives torch's first-max index.
    for offset in np.ndindex(*kernel):
        starts = [0] * len(batch) + [o * d for o, d in zip(offset, dilation, strict=False)]
        limits = list(batch) + [st + (o - 1) * s + 1 for st, o, s in
                                zip(starts[len(batch):], outs, stride, strict=False)]
        strides = [1] * len(batch) + list(stride)
        v = lax.slice(xp, starts, limits, strides)
        i = lax.slice(ip, starts, limits, strides)
        if best is None:
            best, best_index = v, i
            continue
        take = v > best
        if dtypes.is_floating(x.dtype):
            take = take | (jnp.isnan(v) & ~jnp.isnan(best))
        best = jnp.where(take, v, best)
        best_index = jnp.where(take, i, best_index)
    return best, best_index


@register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, 2)


@register(aten.max_pool3d_with_indices.default)
def max_pool3d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, 3)


@register(aten.max_pool2d.default)
def max_pool2d(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, 2)[0]


def _max_pool_backward(grad, x, indices, n):
    """Scatter-add each output gradient to the input element its index names."""
    batch = x.shape[:-n]
    spatial = int(np.prod(x.shape[-n:]))
    g = grad.reshape(-1, int(np.prod(grad.shape[-n:])))
    idx = indices.reshape(g.shape)
    rows = jnp.arange(g.shape[0])[:, None]
    out = jnp.zeros((g.shape[0], spatial), grad.dtype).at[rows, idx].add(g)
    return out.reshape(batch + x.shape[-n:])


@register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _max_pool_backward(grad, x, indices, 2)


@register(aten.max_pool3d_with_indices_backward.default)
def max_pool3d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _max_pool_backward(grad, x, indices, 3)


@register(aten.max_unpool2d.default, aten.max_unpool3d.default)
def max_unpool(x, indices, output_size, *args):
    n = len(output_size)
    batch = x.shape[:-n]
    g = x.reshape(-1, int(np.prod(x.shape[-n:])))
    rows = jnp.arange(g.shape[0])[:, None]
    out = jnp.zeros((g.shape[0], int(np.prod(output_size))), x.dtype)
    out = out.at[rows, indices.reshape(g.shape)].set(g)
    return out.reshape(batch + tuple(output_size))


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
              n):
    kernel, stride, padding, _, outs = _pool_geometry(
        x, kernel_size, stride, padding, 1, ceil_mode, n)
    c = upcast(x.dtype)
    batch = len(x.shape) - n
    sizes = x.shape[-n:]
    pads = [(0, 0)] * batch
    extra = []
    for size, k, s, p, o in zip(sizes, kernel, stride, padding, outs, strict=False):
        high = max((o - 1) * s + k - size - p, p)
        pads.append((p, high))
        extra.append(high - p)
    window = (1,) * batch + tuple(kernel)
    strides = (1,) * batch + tuple(stride)
    total = lax.reduce_window(jnp.pad(x.astype(c), pads), np.array(0, c), lax.add, window,
                              strides, "VALID")
    if divisor_override:
        return (total / divisor_override).astype(x.dtype)
    # Windows count padding cells (if count_include_pad) but never the ceil_mode overhang.
    ones = jnp.ones(sizes, c)
    inner = [(p, p) if count_include_pad else (0, 0) for p in padding]
    ones = jnp.pad(ones, inner, constant_values=1)
    outer = [(0, e) if count_include_pad else (p, p + e)
             for p, e in zip(padding, extra, strict=True)]
    ones = jnp.pad(ones, outer)
    count = lax.reduce_window(ones, np.array(0, c), lax.add, tuple(kernel), tuple(stride),
                              "VALID")
    return (total / count).astype(x.dtype)


@register(aten.avg_pool2d.default)
def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, 2)


@register(aten.avg_pool3d.default)
def avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, 3)


@register(aten.avg_pool1d.default)
def avg_pool1d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1)


def _avg_pool_backward(grad, x, n, *params):
    c = upcast(x.dtype)
    _, pullback = jax.vjp(lambda v: _avg_pool(v, *params, n), x.astype(c))
    return pullback(grad.astype(c))[0].astype(x.dtype)


@register(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool_backward(grad, x, 2, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


@register(aten.avg_pool3d_backward.default)
def avg_pool3d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool_backward(grad, x, 3, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


def _adaptive_matrix(size: int, out: int, dtype) -> np.ndarray:
    """(out, size) averaging matrix: row i averages [floor(i*size/out), ceil((i+1)*size/out))."""
    m = np.zeros((out, size), dtype=np.float64)
    for i in range(out):
        start = (i * size) // out
        end = -((-(i + 1) * size) // out)
        m[i, start:end] = 1.0 / (end - start)
    return m.astype(dtype)


def _adaptive_avg_pool(x, output_size, n):
    c = upcast(x.dtype)
    out = x.astype(c)
    for axis, o in zip(range(x.ndim - n, x.ndim), int_list(output_size), strict=False):
        m = _adaptive_matrix(x.shape[axis], o, c)
        out = jnp.moveaxis(jnp.tensordot(out, m, axes=[[axis], [1]], precision=HIGHEST), -1,
                           axis)
    return out.astype(x.dtype)


@register(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(x, output_size):
    return _adaptive_avg_pool(x, output_size, 2)


@register(aten._adaptive_avg_pool3d.default, aten.adaptive_avg_pool3d.default)
def adaptive_avg_pool3d(x, output_size):
    return _adaptive_avg_pool(x, output_size, 3)


@register(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(grad, x):
    _, pullback = jax.vjp(lambda v: _adaptive_avg_pool(v, grad.shape[-2:], 2), x)
    return pullback(grad)[0]


@register(aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool3d_backward(grad, x):
    _, pullback = jax.vjp(lambda v: _adaptive_avg_pool(v, grad.shape[-3:], 3), x)
    return pullback(grad)[0]


def _adaptive_max_pool(x, output_size, n):
    sizes, outs = x.shape[-n:], int_list(output_size)
    flat_index = jnp.arange(int(np.prod(sizes)), dtype=np.int64).reshape(sizes)
    values, indices = x, jnp.broadcast_to(flat_index, x.shape)
    # One axis at a time: gather each window (padded to the longest) and take its max.
    for axis, size, out in zip(range(x.ndim - n, x.ndim), sizes, outs, strict=False):
        starts = [(i * size) // out for i in range(out)]
        ends = [-((-(i + 1) * size) // out) for i in range(out)]
        width = max(e - s for s, e in zip(starts, ends, strict=False))
        window = np.array([[min(s + j, e - 1) for j in range(width)] for s, e in
                           zip(starts, ends, strict=False)])
        v = jnp.take(values, window, axis=axis)  # (..., out, width, ...)
        i = jnp.take(indices, window, axis=axis)
        pick = jnp.argmax(v, axis=axis + 1, keepdims=True)
        values = jnp.squeeze(jnp.take_along_axis(v, pick, axis=axis + 1), axis + 1)
        indices = jnp.squeeze(jnp.take_along_axis(i, pick, axis=axis + 1), axis + 1)
    return values, indices


@register(aten.adaptive_max_pool2d.default)
def adaptive_max_pool2d(x, output_size):
    return _adaptive_max_pool(x, output_size, 2)


@register(aten.adaptive_max_pool3d.default)
def adaptive_max_pool3d(x, output_size):
    return _adaptive_max_pool(x, output_size, 3)


@register(aten.adaptive_max_pool2d_backward.default)
def adaptive_max_pool2d_backward(grad, x, indices):
    return _max_pool_backward(grad, x, indices, 2)


@register(aten.adaptive_max_pool3d_backward.default)
def adaptive_max_pool3d_backward(grad, x, indices):
    return _max_pool_backward(grad, x, indices, 3)


@register(aten.adaptive_avg_pool1d.default)
def adaptive_avg_pool1d(x, output_size):
    return _adaptive_avg_pool(x, output_size, 1)
