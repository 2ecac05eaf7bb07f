"""Small helpers shared by the op modules (argument normalisation, promotion)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from torch_xla.lowering import dtypes

aten = torch.ops.aten

HALF_TYPES = (np.dtype(jnp.bfloat16), np.dtype(np.float16))
# Matmuls and convolutions at full float32 precision, as torch computes them on the CPU.
HIGHEST = lax.Precision.HIGHEST


def canon_dim(dim: int, ndim: int) -> int:
    """A possibly negative dim as an index in [0, ndim); a 0-d tensor accepts 0 and -1."""
    size = max(ndim, 1)
    if not -size <= dim < size:
        raise IndexError(f"dim {dim} out of range for a tensor with {ndim} dims")
    return dim % size


def reduce_dims(dim, ndim: int) -> tuple[int, ...]:
    """Reduction dims: None or [] mean all dims (ATen convention), an int means one dim."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    if len(dim) == 0:
        return tuple(range(ndim))
    return tuple(sorted({canon_dim(d, ndim) for d in dim if ndim > 0}))


def to_array(x, dtype=None) -> jnp.ndarray:
    """A jax array of `dtype` from an array or a Python scalar."""
    if dtype is not None:
        dtype = np.dtype(dtype)
    if isinstance(x, (bool, int, float, complex)):
        return jnp.asarray(x, dtype=dtype)
    x = jnp.asarray(x)
    return x if dtype is None or x.dtype == dtype else x.astype(dtype)


def promote(*args):
    """Every argument as an array of torch's promoted dtype (Nones pass through)."""
    dtype = dtypes.result_type(*args)
    return tuple(None if a is None else to_array(a, dtype) for a in args)


def upcast(dtype) -> np.dtype:
    """Half types compute in float32, as torch's CPU kernels do."""
    return np.dtype(np.float32) if np.dtype(dtype) in HALF_TYPES else np.dtype(dtype)


def jax_dtype(dtype: torch.dtype | None, default=None):
    return default if dtype is None else dtypes.to_jax(dtype)


def int_list(x) -> list[int]:
    if isinstance(x, int):
        return [x]
    return [int(v) for v in x]


def expand_param(value, n: int) -> list[int]:
    """A conv/pool parameter given as one int or a list of one or n ints, as n ints."""
    values = int_list(value)
    return values * n if len(values) == 1 else values
