"""The Cephes ports in lowering/ops/gamma.py against torch's CPU kernels, including the
negative arguments and poles where jax's zeta and polygamma disagree with torch."""

import pytest
import torch

from .harness import check_op

aten = torch.ops.aten


def _grid() -> torch.Tensor:
    edges = torch.tensor([0.0, -0.0, -1.0, -3.0, 0.5, 1.0, 10.0, 1e-3, 1e4, -2.5,
                          float("inf"), float("nan")])
    return torch.cat([torch.linspace(-9.3, 12.7, 97), edges])


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_polygamma(n, dtype):
    check_op(aten.polygamma.default, (n, _grid().to(dtype)))


@pytest.mark.parametrize("n", [0, 1, 2])
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_polygamma_integer_inputs(n, dtype):
    check_op(aten.polygamma.default, (n, torch.tensor([0, 1, 2, 5]).to(dtype)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zeta(dtype):
    x = torch.tensor([0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 7.5, 12.0]).to(dtype)
    q = _grid().to(dtype)
    check_op(aten.special_zeta.default, (x[:, None], q[None, :]))


def test_zeta_integer_inputs():
    x, q = torch.tensor([[2], [3]]), torch.tensor([-2, -1, 0, 1, 4])
    check_op(aten.special_zeta.default, (x, q))
    check_op(aten.special_zeta.default, (x.bool(), q.bool()))
