"""Tensor factories, fills and dtype conversion.

Factories receive device/layout/pin_memory/memory_format keywords: the device is the
engine's business, so they are accepted and ignored. Uninitialised memory (`empty*`) is
zeros.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from torch_xla.lowering import dtypes
from torch_xla.lowering.ops._common import aten, int_list, jax_dtype, to_array
from torch_xla.lowering.registry import register


def _scalar_type(value) -> np.dtype:
    """torch's dtype for a tensor made from a Python scalar (full, scalar_tensor, ...)."""
    if isinstance(value, bool):
        return np.dtype(np.bool_)
    if isinstance(value, int):
        return np.dtype(np.int64)
    if isinstance(value, complex):
        return dtypes.default_complex()
    return dtypes.default_float()


def _fill(size, value, dtype):
    return jnp.full(tuple(int_list(size)), value, dtype=dtype)


@register(aten.empty.memory_format, aten.empty_strided.default, aten.empty_permuted.default,
          aten.zeros.default)
def zeros(size, *args, dtype=None, layout=None, device=None, pin_memory=None,
          memory_format=None):
    return _fill(size, 0, jax_dtype(dtype, dtypes.default_float()))


@register(aten.ones.default)
def ones(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill(size, 1, jax_dtype(dtype, dtypes.default_float()))


@register(aten.full.default)
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill(size, fill_value, jax_dtype(dtype, _scalar_type(fill_value)))


@register(aten.scalar_tensor.default)
def scalar_tensor(value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.asarray(value, jax_dtype(dtype, dtypes.default_float()))


def _like(x, value, dtype):
    return jnp.full(x.shape, value, jax_dtype(dtype, x.dtype))


@register(aten.empty_like.default, aten.zeros_like.default)
def zeros_like(x, *, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    return _like(x, 0, dtype)


@register(aten.ones_like.default)
def ones_like(x, *, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):
    return _like(x, 1, dtype)


@register(aten.full_like.default)
def full_like(x, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):
    return _like(x, fill_value, dtype)


@register(aten.new_empty.default, aten.new_zeros.default, aten.new_empty_strided.default)
def new_zeros(x, size, *args, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill(size, 0, jax_dtype(dtype, x.dtype))


@register(aten.new_ones.default)
def new_ones(x, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill(size, 1, jax_dtype(dtype, x.dtype))


@register(aten.new_full.default)
def new_full(x, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill(size, fill_value, jax_dtype(dtype, x.dtype))


@register(aten.fill.Scalar, aten.fill.Tensor)
def fill(x, value):
    return jnp.full(x.shape, jnp.asarray(value).astype(x.dtype), x.dtype)


@register(aten.zero.default)
def zero(x):
    return jnp.zeros_like(x)


def _arange_dtype(*values) -> np.dtype:
    if all(isinstance(v, int) for v in values):
        return np.dtype(np.int64)
    return dtypes.default_float()


@register(aten.arange.default, aten.arange.start, aten.arange.start_step)
def arange(*args, dtype=None, layout=None, device=None, pin_memory=None):
    start, end, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    out = jax_dtype(dtype, _arange_dtype(start, end, step))
    if dtypes.is_integral(out):
        values = _integer_arange(start, end, step, out)
    else:
        # torch computes start + i * step in double and rounds each element once.
        count = max(math.ceil((end - start) / step), 0)
        values = start + np.arange(count, dtype=np.float64) * step
    # Computed at trace time: the graph holds a constant of the result dtype.
    return jnp.asarray(values.astype(out))


def _integer_arange(start, end, step, out) -> np.ndarray:
    """torch's integer arange: start and step truncated to int64, then stepped exactly.
    int64 takes its length from the truncated bounds too, narrower types from the given
    ones (torch's `compute_arange_size`): arange(0.5, 5.7, 1.5) is [0, 1, 2, 3, 4] in
    int64 and [0, 1, 2, 3] in int32."""
    first, last, stride = int(start), int(end), int(step)  # int() truncates, as C++ does
    if np.dtype(out) == np.int64:
        sign = (stride > 0) - (stride < 0)
        count = _truncating_div(last - first + stride - sign, stride)
    else:
        count = math.ceil((end - start) / step)
    return first + np.arange(max(count, 0), dtype=np.int64) * stride


def _truncating_div(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b > 0) else -quotient


@register(aten.linspace.default)
def linspace(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    out = jax_dtype(dtype, dtypes.default_float())
    compute = np.dtype(np.float32) if out == np.float32 else np.dtype(np.float64)
    if steps == 1:
        return jnp.asarray(np.asarray([start]).astype(compute).astype(out))
    start_c, end_c = compute.type(start), compute.type(end)
    step = (end_c - start_c) / compute.type(steps - 1)
    i = np.arange(steps).astype(compute)
    # torch fills the first half from start and the second half from end.
    values = np.where(np.arange(steps) < steps // 2, start_c + step * i,
                      end_c - step * (compute.type(steps - 1) - i))
    return jnp.asarray(values.astype(compute).astype(out))


@register(aten.logspace.default)
def logspace(start, end, steps, base=10.0, *, dtype=None, layout=None, device=None,
             pin_memory=None):
    out = jax_dtype(dtype, dtypes.default_float())
    wide = out in (np.dtype(np.float64), np.dtype(np.complex128), np.dtype(np.int64))
    compute = np.dtype(np.float64) if wide else np.dtype(np.float32)
    exponents = linspace(start, end, steps, dtype=dtypes.to_torch(compute))
    return jnp.power(compute.type(base), exponents).astype(out)


@register(aten.eye.default, aten.eye.m)
def eye(n, m=None, *, dtype=None, layout=None, device=None, pin_memory=None):
    return jnp.eye(n, n if m is None else m, dtype=jax_dtype(dtype, dtypes.default_float()))


@register(aten.tril_indices.default)
def tril_indices(row, col, offset=0, *, dtype=None, layout=None, device=None,
                 pin_memory=None):
    i, j = np.tril_indices(row, offset, col)
    return jnp.asarray(np.stack([i, j])).astype(jax_dtype(dtype, np.int64))


@register(aten.triu_indices.default)
def triu_indices(row, col, offset=0, *, dtype=None, layout=None, device=None,
                 pin_memory=None):
    i, j = np.triu_indices(row, offset, col)
    return jnp.asarray(np.stack([i, j])).astype(jax_dtype(dtype, np.int64))


# ---------------------------------------------------------------------------------------
# Conversion.


def convert(x, dtype: np.dtype):
    """Cast with torch's semantics (complex -> real drops the imaginary part)."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if dtypes.is_complex(x.dtype) and not dtypes.is_complex(dtype):
        x = jnp.real(x)
    if dtype == np.bool_:
        return x != 0
    if dtypes.is_integral(dtype) and dtype.itemsize < 4 and not dtypes.is_integral(
            x.dtype, include_bool=True):
        # torch's CPU casts floats to narrow ints through int64, so they wrap; XLA clamps.
        x = lax.convert_element_type(x, np.int64)
    return lax.convert_element_type(x, dtype)


@register(aten._to_copy.default)
def to_copy(x, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None):
    return x if dtype is None else convert(x, dtypes.to_jax(dtype))


@register(aten.copy.default)
def copy(x, src, non_blocking=False):
    return jnp.broadcast_to(convert(to_array(src), x.dtype), x.shape)


@register(aten._local_scalar_dense.default)
def local_scalar_dense(x):
    return x.reshape(())


@register(aten.sym_size.int)
def sym_size(x, dim):
    return x.shape[dim]


@register(aten.sym_numel.default)
def sym_numel(x):
    return int(np.prod(x.shape))


@register(aten.sym_storage_offset.default)
def sym_storage_offset(x):
    return 0


@register(aten.sym_stride.int)
def sym_stride(x, dim):
    # Arrays are row-major and contiguous.
    return int(np.prod(x.shape[dim % max(x.ndim, 1) + 1:]))


@register(getattr(aten, "sym_is_contiguous", None) and aten.sym_is_contiguous.default)
def sym_is_contiguous(x, memory_format=None):
    return True


@register(aten.range.step, aten.range.default)
def range_(start, end, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    # Unlike arange, range includes `end` and defaults to the default float dtype.
    out = jax_dtype(dtype, dtypes.default_float())
    count = int(math.floor((end - start) / step)) + 1
    values = start + np.arange(max(count, 0), dtype=np.float64) * step
    return jnp.asarray(values.astype(out))


@register(aten.fft_fftfreq.default)
def fft_fftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    out = jax_dtype(dtype, dtypes.default_float())
    return jnp.asarray(np.fft.fftfreq(n, d).astype(out))


@register(aten.fft_rfftfreq.default)
def fft_rfftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    out = jax_dtype(dtype, dtypes.default_float())
    return jnp.asarray(np.fft.rfftfreq(n, d).astype(out))


def _window(name, length, periodic, *params, dtype=None):
    """torch's window functions, computed at trace time in float64 like torch's kernels."""
    out = jax_dtype(dtype, dtypes.default_float())
    if length == 0:
        return jnp.zeros((0,), out)
    if length == 1:
        return jnp.ones((1,), out)
    n = length + 1 if periodic else length
    k = np.arange(n, dtype=np.float64)
    if name == "hann":
        w = 0.5 - 0.5 * np.cos(2 * np.pi * k / (n - 1))
    elif name == "hamming":
        alpha = params[0] if params else 0.54
        beta = params[1] if len(params) > 1 else 0.46
        w = alpha - beta * np.cos(2 * np.pi * k / (n - 1))
    elif name == "blackman":
        w = 0.42 - 0.5 * np.cos(2 * np.pi * k / (n - 1)) + 0.08 * np.cos(4 * np.pi * k / (n - 1))
    elif name == "bartlett":
        w = 1 - np.abs(2 * k / (n - 1) - 1)
    else:  # kaiser
        beta = params[0] if params else 12.0
        w = np.i0(beta * np.sqrt(1 - (2 * k / (n - 1) - 1) ** 2)) / np.i0(beta)
    w = w[:length]
    return jnp.asarray(w.astype(out))


def _window_op(name):
    def lower(window_length, periodic=True, *params, dtype=None, layout=None, device=None,
              pin_memory=None):
        return _window(name, window_length, periodic, *params, dtype=dtype)

    lower.__qualname__ = f"window[{name}]"
    return lower


for _name in ("hann", "hamming", "blackman", "bartlett", "kaiser"):
    _packet = getattr(aten, f"{_name}_window")
    register(*[getattr(_packet, o) for o in _packet.overloads() if "out" not in o])(
        _window_op(_name))
