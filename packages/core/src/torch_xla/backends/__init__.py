"""`torch_xla.backends`: settings of the XLA backend, as `torch.backends.*` are for theirs.

The matmul precision applies to matrix multiplications, convolutions and attention
on 32-bit inputs in every graph lowered after the change; programs compiled with
another precision are dropped from the in-memory cache and compile again (the
persistent cache keys carry the precision). The default is `'highest'` (full
float32, as PyTorch computes on the CPU and, by default, on CUDA); PyTorch/XLA's
default is `'default'` (one bfloat16 pass on TPU): set it for that speed.
"""

from __future__ import annotations

import logging
from typing import Final, Literal

from torch_xla.lowering import policy

logger = logging.getLogger(__name__)

__all__ = ["set_mat_mul_precision", "get_mat_mul_precision"]

PRECISIONS: Final = tuple(policy.MATMUL_PRECISIONS)
MatMulPrecision = Literal["default", "high", "highest"]

_WARNING_MESSAGE: Final = (
    "Setting the mat mul precision more than once is not recommended: graphs compiled "
    "before compile again with the new precision. If you need to, check that each setting "
    "behaves as expected."
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
    logger.warning(_WARNING_MESSAGE)
    policy.set_matmul_precision(precision)


def get_mat_mul_precision() -> MatMulPrecision:
    """The current precision: `'default'`, `'high'` or `'highest'`."""
    return policy.matmul_precision  # type: ignore[return-value]
