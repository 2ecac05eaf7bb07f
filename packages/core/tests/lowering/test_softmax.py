"""softmax / log_softmax and their backward ops."""

import torch

from .harness import check_op

aten = torch.ops.aten


def test_softmax_family_backward():
    torch.manual_seed(0)
    x = torch.randn(3, 7)
    for forward, backward in [(aten._softmax.default, aten._softmax_backward_data.default),
                              (aten._log_softmax.default,
                               aten._log_softmax_backward_data.default)]:
        out = forward(x, 1, False)
        check_op(forward, (x, 1, False))
        check_op(backward, (torch.randn(3, 7), out, 1, torch.float32))
