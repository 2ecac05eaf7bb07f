"""Pointwise lowerings at the values where jax's and torch's definitions differ."""

import math

import numpy as np
import pytest
import torch

from .harness import check_op, run_lowering

aten = torch.ops.aten

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("op", [aten.sign.default, aten.sgn.default], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16,
                                   torch.bfloat16], ids=str)
def test_sign_of_nan_and_negative_zero(op, dtype):
    """torch computes (0 < x) - (x < 0): NaN gives 0 (jnp.sign gives NaN) and -0 gives
    +0. Exact: the result is -1, 0 or 1."""
    x = torch.tensor([NAN, -NAN, -0.0, 0.0, 2.5, -3.0, INF, -INF], dtype=dtype)
    check_op(op, (x,))
    ours = torch.from_numpy(np.asarray(run_lowering(op, (x,), {})).astype(np.float64))
    torch.testing.assert_close(ours, op(x).double(), rtol=0, atol=0)
    assert not ours[:4].signbit().any()  # assert_close takes -0 for +0


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_sgn_of_complex_nan(dtype):
    """x / |x|, NaN wherever a part is NaN, 0 at 0. Infinite parts are left out: the CPU's
    complex64 and complex128 kernels disagree there. Tolerance: the harness's for the dtype."""
    x = torch.tensor([complex(NAN, 1), complex(1, NAN), complex(NAN, NAN), 0j,
                      complex(-0.0, 0.0), complex(3, -4), complex(-1e-30, 1e-30)], dtype=dtype)
    check_op(aten.sgn.default, (x,))
