"""The Cephes ports in lowering/ops/bessel.py against torch's CPU kernels, over every
branch (small and asymptotic arguments, 0, negatives, inf and NaN)."""

import pytest
import torch

from .harness import check_op

aten = torch.ops.aten

OPS = [
    aten.special_bessel_y0.default,
    aten.special_bessel_y1.default,
    aten.special_modified_bessel_k0.default,
    aten.special_modified_bessel_k1.default,
    aten.special_scaled_modified_bessel_k0.default,
    aten.special_scaled_modified_bessel_k1.default,
    aten.special_airy_ai.default,
]


def _grid() -> torch.Tensor:
    edges = torch.tensor([0.0, -0.0, 1e-6, 2.0, 2.09, -2.09, 5.0, 8.3203353, 103.0, 110.0,
                          -1.0, float("inf"), -float("inf"), float("nan")])
    return torch.cat([torch.linspace(-12, 30, 211), torch.logspace(-4, 2, 40), edges])


@pytest.mark.parametrize("op", OPS, ids=lambda op: op._schema.name)
def test_matches_eager_on_every_branch(op):
    check_op(op, (_grid(),))


@pytest.mark.parametrize("op", OPS, ids=lambda op: op._schema.name)
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.float64])
def test_other_dtypes(op, dtype):
    x = torch.tensor([0, 1, 3, 7]).to(dtype) if dtype != torch.float64 else _grid().double()
    check_op(op, (x,))
