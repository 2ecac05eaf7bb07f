"""`torch_xla.backends`: settings of the XLA backend, as `torch.backends.*` are for theirs.

The matmul precision is JAX's `jax_default_matmul_precision`: every graph
traced after a change carries it in its dots and convolutions on 32-bit inputs.
A graph already compiled keeps the precision it was compiled with, so set it
once, before the first step.
"""

from __future__ import annotations

import logging
from typing import Final, Literal

import jax

logger = logging.getLogger(__name__)

__all__ = ["set_mat_mul_precision", "get_mat_mul_precision"]

PRECISIONS: Final = ("default", "high", "highest")
MatMulPrecision = Literal["default", "high", "highest"]

# What JAX may hold (set by us or by the user's own JAX code), as our names.
_FROM_JAX: Final = {
    None: "default",
    "default": "default",
    "bfloat16": "default",
    "high": "high",
    "tensorfloat32": "high",
    "bfloat16_3x": "high",
    "highest": "highest",
    "float32": "highest",
}

_WARNING: Final = (
    "Setting the mat mul precision more than once is not recommended: graphs already "
    "compiled keep their precision. If you need to, check that each setting behaves as "
    "expected."
)


def set_mat_mul_precision(precision: MatMulPrecision) -> None:
    """The precision of matrix multiplications and convolutions on 32-bit inputs.

    `'default'` is the fastest (on TPU, one bfloat16 pass), `'high'` about 14
    bits (three passes), `'highest'` about 22 bits (six passes, full float32).
    A backend without such modes (the CPU) computes in float32 whatever is set.
    """
    if precision not in PRECISIONS:
        raise ValueError(
            f"Invalid precision: {precision!r}. Must be one of {', '.join(PRECISIONS)}."
        )
    logger.warning(_WARNING)
    jax.config.update("jax_default_matmul_precision", precision)


def get_mat_mul_precision() -> MatMulPrecision:
    """The current precision: `'default'`, `'high'` or `'highest'`."""
    current = jax.config.jax_default_matmul_precision
    if current not in _FROM_JAX:
        raise RuntimeError(
            f"JAX's jax_default_matmul_precision is {current!r}, which has no torch_xla name "
            f"({', '.join(PRECISIONS)}); set one with set_mat_mul_precision()."
        )
    return _FROM_JAX[current]
