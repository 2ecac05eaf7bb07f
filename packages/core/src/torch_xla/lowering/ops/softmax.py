"""softmax / log_softmax (and the -inf-safe softmax of attention) with their backward
ops; half types compute in float32, as torch's CPU kernels do."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from torch_xla.lowering import dtypes
from torch_xla.lowering.ops._common import aten, canon_dim, upcast
from torch_xla.lowering.registry import register


@register(aten._softmax.default)
def softmax(x, dim, half_to_float):
    out = np.float32 if half_to_float else x.dtype
    if x.ndim == 0:
        return jnp.ones((), out)
    return jax.nn.softmax(x.astype(upcast(x.dtype)), axis=canon_dim(dim, x.ndim)).astype(out)


@register(aten._safe_softmax.default)
def safe_softmax(x, dim, dtype=None):
    if dtype is not None:
        x = x.astype(dtypes.to_jax(dtype))
    axis = canon_dim(dim, x.ndim)
    out = softmax(x, axis, False)
    # Rows that are all -inf give 0 instead of NaN.
    return jnp.where(jnp.all(x == -jnp.inf, axis=axis, keepdims=True), 0, out).astype(out.dtype)


@register(aten._log_softmax.default)
def log_softmax(x, dim, half_to_float):
    out = np.float32 if half_to_float else x.dtype
    if x.ndim == 0:
        return jnp.zeros((), out)
    return jax.nn.log_softmax(x.astype(upcast(x.dtype)), axis=canon_dim(dim, x.ndim)).astype(out)


@register(aten._softmax_backward_data.default)
def softmax_backward_data(grad, output, dim, input_dtype):
    c = upcast(grad.dtype)
    g, y = grad.astype(c), output.astype(c)
    axis = canon_dim(dim, y.ndim)
    out = y * (g - jnp.sum(g * y, axis=axis, keepdims=True)) if y.ndim else g * 0
    return out.astype(dtypes.to_jax(input_dtype))


@register(aten._log_softmax_backward_data.default)
def log_softmax_backward_data(grad, output, dim, input_dtype):
    c = upcast(grad.dtype)
    g, y = grad.astype(c), output.astype(c)
    axis = canon_dim(dim, y.ndim)
    out = g - jnp.exp(y) * jnp.sum(g, axis=axis, keepdims=True) if y.ndim else g * 0
    return out.astype(dtypes.to_jax(input_dtype))
