"""Padding lowerings: reflection and replication backward."""

import torch

from .harness import check_op

aten = torch.ops.aten


def test_reflection_replication_pad_backward():
    x = torch.randn(2, 3, 5, 6)
    check_op(aten.reflection_pad2d_backward.default, (torch.randn(2, 3, 8, 9), x, [1, 2, 2, 1]))
    check_op(aten.replication_pad2d_backward.default, (torch.randn(2, 3, 8, 9), x, [1, 2, 2, 1]))
