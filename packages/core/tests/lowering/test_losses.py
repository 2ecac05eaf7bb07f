"""Loss lowerings: nll (ignore_index, weights, every reduction) and mse backward."""

import pytest
import torch

from .harness import check_op

aten = torch.ops.aten


@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_forward_backward(reduction, weighted):
    torch.manual_seed(0)
    x = torch.log_softmax(torch.randn(5, 4), 1)
    target = torch.tensor([0, 3, -100, 2, 1])
    weight = torch.rand(4) if weighted else None
    args = (x, target, weight, reduction, -100)
    check_op(aten.nll_loss_forward.default, args)
    out, total = aten.nll_loss_forward.default(*args)
    check_op(aten.nll_loss_backward.default, (torch.ones_like(out), *args, total))
    x2 = torch.randn(2, 4, 3, 3)
    t2 = torch.randint(0, 4, (2, 3, 3))
    check_op(aten.nll_loss2d_forward.default, (x2, t2, weight, reduction, -100))
    out2, total2 = aten.nll_loss2d_forward.default(x2, t2, weight, reduction, -100)
    check_op(aten.nll_loss2d_backward.default,
             (torch.ones_like(out2), x2, t2, weight, reduction, -100, total2))


def test_mse_loss_backward():
    check_op(aten.mse_loss_backward.default,
             (torch.tensor(1.5), torch.randn(4, 5), torch.randn(4, 5), 1))
