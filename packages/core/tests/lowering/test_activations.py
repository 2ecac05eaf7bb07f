"""Activation backward ops, compared with the eager ATen op directly."""

import pytest
import torch

from .harness import check_op

aten = torch.ops.aten


@pytest.mark.parametrize("op,args", [
    (aten.threshold_backward.default, (torch.randn(4, 5), torch.randn(4, 5), 0.0)),
    (aten.gelu_backward.default, (torch.randn(4, 5), torch.randn(4, 5))),
    (aten.silu_backward.default, (torch.randn(4, 5), torch.randn(4, 5))),
    (aten.sigmoid_backward.default, (torch.randn(4, 5), torch.rand(4, 5))),
    (aten.tanh_backward.default, (torch.randn(4, 5), torch.rand(4, 5))),
    (aten.hardtanh_backward.default, (torch.randn(4, 5), torch.randn(4, 5), -0.5, 0.5)),
    (aten.leaky_relu_backward.default, (torch.randn(4, 5), torch.randn(4, 5), 0.2, False)),
    (aten.elu_backward.default, (torch.randn(4, 5), 1.0, 1.0, 1.0, False, torch.randn(4, 5))),
    (aten.softplus_backward.default, (torch.randn(4, 5), torch.randn(4, 5), 1.0, 20.0)),
    (aten.hardswish_backward.default, (torch.randn(4, 5), torch.randn(4, 5) * 4)),
    (aten.hardsigmoid_backward.default, (torch.randn(4, 5), torch.randn(4, 5) * 4)),
], ids=lambda v: str(v) if not isinstance(v, tuple) else "")
def test_pointwise_backward(op, args):
    check_op(op, args)


def test_gelu_tanh_backward():
    check_op(aten.gelu_backward.default, (torch.randn(4, 5), torch.randn(4, 5)),
             {"approximate": "tanh"})
