"""torch dtype <-> jax/numpy dtype, and torch's type promotion computed on jax inputs.

Lowerings see tensors as jax arrays and scalars as Python numbers, so they cannot ask
torch for the result dtype; `result_type` reproduces torch's rules (dimensioned tensors
beat zero-dim tensors beat Python scalars within a category) so that no lowering
computes in float64 where torch computes in float32.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch

_PAIRS: list[tuple[torch.dtype, np.dtype]] = [
    (torch.bool, np.dtype(np.bool_)),
    (torch.uint8, np.dtype(np.uint8)),
    (torch.int8, np.dtype(np.int8)),
    (torch.int16, np.dtype(np.int16)),
    (torch.int32, np.dtype(np.int32)),
    (torch.int64, np.dtype(np.int64)),
    (torch.uint16, np.dtype(np.uint16)),
    (torch.uint32, np.dtype(np.uint32)),
    (torch.uint64, np.dtype(np.uint64)),
    (torch.float16, np.dtype(np.float16)),
    (torch.bfloat16, np.dtype(jnp.bfloat16)),
    (torch.float32, np.dtype(np.float32)),
    (torch.float64, np.dtype(np.float64)),
    (torch.complex64, np.dtype(np.complex64)),
    (torch.complex128, np.dtype(np.complex128)),
]
for _torch_name, _jnp_name in [
    ("float8_e4m3fn", "float8_e4m3fn"),
    ("float8_e5m2", "float8_e5m2"),
    ("float8_e4m3fnuz", "float8_e4m3fnuz"),
    ("float8_e5m2fnuz", "float8_e5m2fnuz"),
]:
    if hasattr(torch, _torch_name) and hasattr(jnp, _jnp_name):
        _PAIRS.append((getattr(torch, _torch_name), np.dtype(getattr(jnp, _jnp_name))))

TORCH_TO_JAX: dict[torch.dtype, np.dtype] = dict(_PAIRS)
JAX_TO_TORCH: dict[np.dtype, torch.dtype] = {j: t for t, j in _PAIRS}


def to_jax(dtype: torch.dtype) -> np.dtype:
    """The numpy/jax dtype for a torch dtype."""
    try:
        return TORCH_TO_JAX[dtype]
    except KeyError:
        raise TypeError(
            f"torch dtype {dtype} has no jax equivalent; "
            f"supported: {sorted(map(str, TORCH_TO_JAX))}"
        ) from None


def to_torch(dtype) -> torch.dtype:
    """The torch dtype for a numpy/jax dtype (anything `np.dtype` accepts)."""
    try:
        return JAX_TO_TORCH[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"jax dtype {dtype} has no torch equivalent") from None


def default_float() -> np.dtype:
    """torch.get_default_dtype() as a jax dtype (what a Python float becomes)."""
    return to_jax(torch.get_default_dtype())


def default_complex() -> np.dtype:
    return np.dtype(np.complex128 if default_float() == np.float64 else np.complex64)


def is_floating(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.floating)


def is_complex(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.complexfloating)


def is_integral(dtype, include_bool: bool = False) -> bool:
    dtype = np.dtype(dtype)
    return jnp.issubdtype(dtype, jnp.integer) or (include_bool and dtype == np.bool_)


def _category(dtype) -> int:
    if dtype is None:
        return -1
    if dtype == np.bool_:
        return 0
    if is_integral(dtype):
        return 1
    if is_floating(dtype):
        return 2
    return 3


def promote_types(a, b) -> np.dtype:
    """torch.promote_types on jax dtypes (None acts as 'no input')."""
    if a is None:
        return b
    if b is None:
        return a
    return to_jax(torch.promote_types(to_torch(a), to_torch(b)))


def _to_complex(dtype) -> np.dtype:
    return np.dtype(np.complex128 if np.dtype(dtype) == np.float64 else np.complex64)


def _combine(higher, lower):
    # Mirrors c10 combine_categories: a higher-priority class wins unless the lower one
    # is of a higher category (e.g. int tensor + float scalar -> float).
    if higher is None:
        return lower
    if lower is None:
        return higher
    if is_complex(higher):
        return higher
    if is_complex(lower):
        return _to_complex(higher) if is_floating(higher) else lower
    if is_floating(higher):
        return higher
    if higher == np.bool_ or is_floating(lower):
        return promote_types(higher, lower)
    return higher


def _scalar_dtype(value) -> np.dtype:
    if isinstance(value, bool):
        return np.dtype(np.bool_)
    if isinstance(value, int):
        return np.dtype(np.int64)
    if isinstance(value, float):
        return default_float()
    if isinstance(value, complex):
        return default_complex()
    raise TypeError(f"not a tensor or Python scalar: {value!r}")


def result_type(*args) -> np.dtype:
    """torch.result_type over jax arrays, numpy values and Python scalars (None ignored)."""
    dim = zero = scalar = None
    for arg in args:
        if arg is None:
            continue
        if isinstance(arg, (bool, int, float, complex)):
            scalar = promote_types(scalar, _scalar_dtype(arg))
        elif getattr(arg, "ndim", 0) == 0:
            zero = promote_types(zero, np.dtype(arg.dtype))
        else:
            dim = promote_types(dim, np.dtype(arg.dtype))
    result = _combine(dim, _combine(zero, scalar))
    if result is None:
        raise ValueError("result_type() needs at least one tensor or scalar")
    return np.dtype(result)


def float_type(*args) -> np.dtype:
    """Promoted dtype, with integers and bool raised to the default float (true division,
    sin, sqrt, ...)."""
    dtype = result_type(*args)
    return dtype if _category(dtype) >= 2 else default_float()


def compute_type(dtype) -> np.dtype:
    """The dtype torch's CPU kernels accumulate in: float32 for half types."""
    dtype = np.dtype(dtype)
    if dtype in (np.dtype(jnp.bfloat16), np.dtype(np.float16)):
        return np.dtype(np.float32)
    return dtype


def sum_type(dtype) -> np.dtype:
    """Result dtype of sum/prod/cumsum without dtype=: integers and bool become int64."""
    return np.dtype(np.int64) if is_integral(dtype, include_bool=True) else np.dtype(dtype)
