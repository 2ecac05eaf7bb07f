"""Resampling: upsample (nearest, nearest-exact, linear, bicubic, anti-aliased) and
grid sampling, with their backward ops (the VJP of the forward formula). Separable
resampling is one matrix per spatial dim."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from torch_xla.lowering.ops._common import HIGHEST, aten, int_list, upcast
from torch_xla.lowering.registry import register


def _output_size(x, output_size, scale_factors, n):
    if output_size is not None:
        return int_list(output_size)
    return [int(math.floor(s * f)) for s, f in zip(x.shape[-n:], scale_factors, strict=False)]


def _source_scale(in_size, out_size, align_corners, scale):
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else in_size / out_size


def _nearest_index(in_size, out_size, scale, exact=False):
    if in_size == out_size and not exact:  # torch copies, whatever the scale
        return np.arange(in_size)
    s = np.float32(_source_scale(in_size, out_size, False, scale))
    dst = np.arange(out_size, dtype=np.float32)
    src = np.floor((dst + 0.5) * s) if exact else np.floor(dst * s)
    return np.minimum(src.astype(np.int64), in_size - 1)


def _upsample_nearest(x, output_size, scales, n, exact=False):
    outs = int_list(output_size)
    scales = list(scales) if scales else [None] * n
    for axis, o, s in zip(range(x.ndim - n, x.ndim), outs, scales, strict=False):
        x = jnp.take(x, _nearest_index(x.shape[axis], o, s, exact), axis=axis)
    return x


def _linear_matrix(in_size, out_size, align_corners, scale, dtype):
    """Linear interpolation as an (out, in) matrix of the compute dtype, its weights as
    torch's kernel makes them (computed in float64 they differed by up to 5e-5): the ratio
    and the source coordinate rounded to the compute dtype (float32 unless float64), the
    coordinate clamped at 0, and both weights rounded to `dtype`, the input's."""
    c = upcast(dtype)
    if in_size == out_size:  # torch copies, whatever the scale
        return np.eye(in_size, dtype=c)
    ratio = float(c.type(_source_scale(in_size, out_size, align_corners, scale)))
    dst = np.arange(out_size, dtype=np.float64)
    # Rounded once from the exact float64 value, as the fused multiply-add that torch's
    # kernel is compiled to rounds `ratio * (dst + 0.5) - 0.5`.
    src = dst * ratio if align_corners else np.maximum((dst + 0.5) * ratio - 0.5, 0)
    src = src.astype(c)
    lo = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    hi = np.minimum(lo + 1, in_size - 1)
    w1 = np.clip(src - lo.astype(c), 0, 1).astype(dtype)
    w0 = (1 - w1.astype(c)).astype(dtype)
    m = np.zeros((out_size, in_size))
    m[np.arange(out_size), lo] += w0
    m[np.arange(out_size), hi] += w1
    return m.astype(c)


def _upsample_linear(x, output_size, align_corners, scales, n):
    c = upcast(x.dtype)
    out = x.astype(c)
    scales = list(scales) if scales else [None] * n
    for axis, o, s in zip(range(x.ndim - n, x.ndim), int_list(output_size), scales, strict=False):
        m = _linear_matrix(x.shape[axis], o, align_corners, s, x.dtype)
        out = jnp.moveaxis(jnp.tensordot(out, m, axes=[[axis], [1]], precision=HIGHEST), -1,
                           axis)
    return out.astype(x.dtype)


@register(aten.upsample_nearest1d.vec, aten.upsample_nearest2d.vec,
          aten.upsample_nearest3d.vec)
def upsample_nearest_vec(x, output_size, scale_factors):
    n = x.ndim - 2
    return _upsample_nearest(x, _output_size(x, output_size, scale_factors, n), scale_factors, n)


@register(aten._upsample_nearest_exact1d.vec, aten._upsample_nearest_exact2d.vec,
          aten._upsample_nearest_exact3d.vec)
def upsample_nearest_exact_vec(x, output_size, scale_factors):
    n = x.ndim - 2
    size = _output_size(x, output_size, scale_factors, n)
    return _upsample_nearest(x, size, scale_factors, n, exact=True)


@register(aten.upsample_nearest1d.default, aten.upsample_nearest2d.default,
          aten.upsample_nearest3d.default)
def upsample_nearest(x, output_size, *scales):
    return _upsample_nearest(x, output_size, _given_scales(scales), len(output_size))


def _given_scales(scales):
    scales = [s for s in scales]
    return scales if any(s is not None for s in scales) else None


@register(aten.upsample_bilinear2d.vec, aten.upsample_linear1d.vec,
          aten.upsample_trilinear3d.vec)
def upsample_linear_vec(x, output_size, align_corners, scale_factors):
    n = x.ndim - 2
    size = _output_size(x, output_size, scale_factors, n)
    return _upsample_linear(x, size, align_corners, scale_factors, n)


@register(aten.upsample_bilinear2d.default, aten.upsample_linear1d.default,
          aten.upsample_trilinear3d.default)
def upsample_linear(x, output_size, align_corners, *scales):
    return _upsample_linear(x, output_size, align_corners, _given_scales(scales),
                            len(output_size))


@register(aten.upsample_nearest2d_backward.default, aten.upsample_nearest1d_backward.default,
          aten.upsample_nearest3d_backward.default)
def upsample_nearest_backward(grad, output_size, input_size, *scales):
    x = jnp.zeros(tuple(input_size), grad.dtype)
    _, pullback = jax.vjp(
        lambda v: _upsample_nearest(v, output_size, _given_scales(scales), len(output_size)), x)
    return pullback(grad)[0]


@register(aten.upsample_bilinear2d_backward.default, aten.upsample_linear1d_backward.default,
          aten.upsample_trilinear3d_backward.default)
def upsample_linear_backward(grad, output_size, input_size, align_corners, *scales):
    x = jnp.zeros(tuple(input_size), grad.dtype)
    _, pullback = jax.vjp(lambda v: _upsample_linear(
        v, output_size, align_corners, _given_scales(scales), len(output_size)), x)
    return pullback(grad)[0]


def _cubic_matrix(in_size, out_size, align_corners, scale):
    """Bicubic (A = -0.75) taps as a matrix; torch clamps the taps at the borders."""
    ratio = np.float32(_source_scale(in_size, out_size, align_corners, scale))
    dst = np.arange(out_size, dtype=np.float32)
    src = dst * ratio if align_corners else (dst + np.float32(0.5)) * ratio - np.float32(0.5)
    low = np.floor(src)
    m = np.zeros((out_size, in_size))
    for k, w in enumerate(_cubic_weights((src - low).astype(np.float64))):
        taps = np.clip(low.astype(np.int64) - 1 + k, 0, in_size - 1)
        np.add.at(m, (np.arange(out_size), taps), w)
    return m


def _triangle(x):
    return np.maximum(1 - np.abs(x), 0)


def _keys_cubic(x):
    x = np.abs(x)
    near, far = _cubic_weights(x, a=-0.5)[1], _cubic_weights(x - 1, a=-0.5)[0]
    return np.where(x < 1, near, np.where(x < 2, far, 0))


def _antialias_matrix(filter_fn, interp_size):
    """torch's anti-aliased resampling: the filter widened by the downscale factor and each
    row normalised to sum to one (`_compute_weights_aa`)."""

    def matrix(in_size, out_size, align_corners, scale):
        if in_size == out_size:  # torch copies, whatever the scale
            return np.eye(in_size)
        ratio = _source_scale(in_size, out_size, align_corners, scale)
        support = interp_size * 0.5 * (ratio if ratio >= 1 else 1)
        inverse = 1 / ratio if ratio >= 1 else 1
        m = np.zeros((out_size, in_size))
        for i in range(out_size):
            center = ratio * (i + 0.5)
            first = max(int(center - support + 0.5), 0)
            taps = np.arange(first, min(int(center + support + 0.5), in_size))
            w = filter_fn((taps - center + 0.5) * inverse)
            m[i, taps] = w / w.sum() if w.sum() != 0 else w
        return m

    return matrix


def _resample(x, output_size, align_corners, scales, matrix):
    """Separable resampling of the trailing len(output_size) dims, one matrix per dim."""
    c = upcast(x.dtype)
    out = x.astype(c)
    n = len(output_size)
    scales = list(scales) if scales else [None] * n
    for axis, o, s in zip(range(x.ndim - n, x.ndim), int_list(output_size), scales, strict=True):
        m = jnp.asarray(matrix(x.shape[axis], o, align_corners, s), c)
        out = jnp.moveaxis(jnp.tensordot(out, m, axes=[[axis], [1]], precision=HIGHEST), -1,
                           axis)
    return out.astype(x.dtype)


_RESAMPLERS = {
    "bicubic": _cubic_matrix,
    "bilinear_aa": _antialias_matrix(_triangle, 2),
    "bicubic_aa": _antialias_matrix(_keys_cubic, 4),
}


def _resampling(kind):
    def lower(x, output_size, align_corners, *scales):
        return _resample(x, output_size, align_corners, _given_scales(scales), _RESAMPLERS[kind])

    def lower_vec(x, output_size, align_corners, scale_factors):
        size = _output_size(x, output_size, scale_factors, 2)
        return _resample(x, size, align_corners, scale_factors, _RESAMPLERS[kind])

    def backward(grad, output_size, input_size, align_corners, *scales):
        x = jnp.zeros(tuple(input_size), grad.dtype)
        _, pullback = jax.vjp(lambda v: lower(v, output_size, align_corners, *scales), x)
        return pullback(grad)[0]

    for fn, suffix in ((lower, ""), (lower_vec, "_vec"), (backward, "_backward")):
        fn.__qualname__ = f"upsample_{kind}{suffix}"
    return lower, lower_vec, backward


for _kind, _name in (("bicubic", "upsample_bicubic2d"), ("bilinear_aa", "_upsample_bilinear2d_aa"),
                     ("bicubic_aa", "_upsample_bicubic2d_aa")):
    _lower, _lower_vec, _backward = _resampling(_kind)
    register(getattr(aten, _name).default)(_lower)
    register(getattr(aten, _name).vec)(_lower_vec)
    register(getattr(aten, f"{_name}_backward").default)(_backward)


@register(aten._upsample_nearest_exact1d.default, aten._upsample_nearest_exact2d.default,
          aten._upsample_nearest_exact3d.default)
def upsample_nearest_exact(x, output_size, *scales):
    return _upsample_nearest(x, output_size, _given_scales(scales), len(output_size), exact=True)


@register(aten._upsample_nearest_exact1d_backward.default,
          aten._upsample_nearest_exact2d_backward.default,
          aten._upsample_nearest_exact3d_backward.default)
def upsample_nearest_exact_backward(grad, output_size, input_size, *scales):
    x = jnp.zeros(tuple(input_size), grad.dtype)
    _, pullback = jax.vjp(lambda v: _upsample_nearest(
        v, output_size, _given_scales(scales), len(output_size), exact=True), x)
    return pullback(grad)[0]


# ---------------------------------------------------------------------------------------
# Grid sampling.


def _grid_sample(x, grid, interpolation_mode, padding_mode, align_corners):
    """grid_sampler_2d/3d: grid[..., 0] indexes the last spatial dim (x), [..., 1] the one
    before (y), [..., 2] depth; modes 0 bilinear, 1 nearest; padding 0 zeros, 1 border,
    2 reflection."""
    n, _, *sizes = x.shape
    dims = len(sizes)
    if interpolation_mode == 2 and dims != 2:
        raise NotImplementedError("grid_sampler: bicubic is defined for 2-D only")

    def unnormalize(coord, size):
        if align_corners:
            return (coord + 1) / 2 * (size - 1)
        return ((coord + 1) * size - 1) / 2

    def reflect(coord, size):
        lo, span = (0.0, 2.0 * (size - 1)) if align_corners else (-0.5, 2.0 * size)
        if span <= 0:
            return jnp.zeros_like(coord)
        extra = jnp.fmod(jnp.abs(coord - lo), span)
        return jnp.where(extra > span / 2, span - extra, extra) + lo

    def source(coord, size):
        coord = unnormalize(coord, size)
        if padding_mode == 1:
            coord = jnp.clip(coord, 0, size - 1)
        elif padding_mode == 2:
            coord = jnp.clip(reflect(coord, size), 0, size - 1)
        return coord

    batch = jnp.arange(n).reshape((n,) + (1,) * (grid.ndim - 2))

    def tap(points, pad=False):
        if pad:  # bicubic applies the padding mode to each tap, not to the centre
            points = [source_padding(p, size) for p, size in zip(points, sizes, strict=True)]
        valid = jnp.ones(points[0].shape, bool)
        for p, size in zip(points, sizes, strict=True):
            valid = valid & (p >= 0) & (p <= size - 1)
        index = [jnp.clip(p, 0, size - 1).astype(np.int32)
                 for p, size in zip(points, sizes, strict=True)]
        values = x[(batch, slice(None), *index)]  # (n, *out, c)
        return jnp.where(valid[..., None], values, 0)

    def source_padding(coord, size):
        if padding_mode == 1:
            return jnp.clip(coord, 0, size - 1)
        if padding_mode == 2:
            return jnp.clip(reflect(coord, size), 0, size - 1)
        return coord

    if interpolation_mode == 2:
        raw = [unnormalize(grid[..., dims - 1 - i], size) for i, size in enumerate(sizes)]
        return _bicubic_taps(raw, tap).astype(x.dtype)
    # coords[i] is the source position along spatial dim i (grid's last entry is dim 0).
    coords = [source(grid[..., dims - 1 - i], size) for i, size in enumerate(sizes)]
    if interpolation_mode == 1:
        out = tap([jnp.round(c) for c in coords])
    else:
        lows = [jnp.floor(c) for c in coords]
        out = 0
        for corner in np.ndindex(*(2,) * dims):
            weight = 1
            points = []
            for c, low, bit in zip(coords, lows, corner, strict=True):
                frac = c - low
                weight = weight * (frac if bit else 1 - frac)
                points.append(low + bit)
            out = out + tap(points) * weight[..., None]
    return jnp.moveaxis(out, -1, 1).astype(x.dtype)


def _cubic_weights(t, a=-0.75):
    """Keys' cubic convolution weights for the 4 taps around a point (torch's A = -0.75)."""
    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _bicubic_taps(coords, tap):
    (iy, ix) = coords
    y0, x0 = jnp.floor(iy), jnp.floor(ix)
    wy, wx = _cubic_weights(iy - y0), _cubic_weights(ix - x0)
    out = 0
    for i in range(4):
        for j in range(4):
            weight = (wy[i] * wx[j])[..., None]
            out = out + tap([y0 - 1 + i, x0 - 1 + j], pad=True) * weight
    return jnp.moveaxis(out, -1, 1)


@register(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def grid_sampler(x, grid, interpolation_mode, padding_mode, align_corners):
    return _grid_sample(x, grid, interpolation_mode, padding_mode, align_corners)


@register(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def grid_sampler_backward(grad, x, grid, interpolation_mode, padding_mode, align_corners,
                             output_mask):
    _, pullback = jax.vjp(
        lambda v, g: _grid_sample(v, g, interpolation_mode, padding_mode, align_corners),
        x, grid)
    grad_input, grad_grid = pullback(grad)
    return (grad_input if output_mask[0] else None), grad_grid
