"""FFT ops (`_fft_r2c`, `_fft_c2r`, `_fft_c2c`): normalization 0 = none, 1 = 1/sqrt(n),
2 = 1/n, applied to the transformed dims."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from torch_xla.lowering.ops._common import aten, canon_dim
from torch_xla.lowering.registry import register


def _scale(x, sizes, normalization):
    n = float(np.prod(sizes)) if sizes else 1.0
    if normalization == 1:
        return x / np.sqrt(n).astype(x.real.dtype)
    if normalization == 2:
        return x / np.asarray(n, x.real.dtype)
    return x


@register(aten._fft_c2c.default)
def fft_c2c(x, dim, normalization, forward):
    axes = [canon_dim(d, x.ndim) for d in dim]
    sizes = [x.shape[a] for a in axes]
    out = jnp.fft.fftn(x, axes=axes, norm="backward") if forward else (
        jnp.fft.ifftn(x, axes=axes, norm="forward"))
    return _scale(out, sizes, normalization).astype(x.dtype)


@register(aten._fft_r2c.default)
def fft_r2c(x, dim, normalization, onesided):
    axes = [canon_dim(d, x.ndim) for d in dim]
    sizes = [x.shape[a] for a in axes]
    complex_dtype = np.complex128 if x.dtype == np.float64 else np.complex64
    if onesided:
        out = jnp.fft.rfftn(x, axes=axes, norm="backward")
    else:
        out = jnp.fft.fftn(x.astype(complex_dtype), axes=axes, norm="backward")
    return _scale(out, sizes, normalization).astype(complex_dtype)


@register(aten._fft_c2r.default)
def fft_c2r(x, dim, normalization, last_dim_size):
    axes = [canon_dim(d, x.ndim) for d in dim]
    sizes = [x.shape[a] for a in axes[:-1]] + [last_dim_size]
    out = jnp.fft.irfftn(x, s=sizes, axes=axes, norm="forward")
    real_dtype = np.float64 if x.dtype == np.complex128 else np.float32
    return _scale(out, sizes, normalization).astype(real_dtype)
