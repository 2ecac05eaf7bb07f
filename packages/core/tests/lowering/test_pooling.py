"""Pooling lowerings: max pooling indices (first max wins) and their backward, average and
adaptive pooling."""

import pytest
import torch

from .harness import check_op

aten = torch.ops.aten


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil", [
    ([2, 2], [2, 2], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], True),
    ([3, 2], [1, 2], [1, 0], [2, 1], False),
])
def test_max_pool2d_with_indices_and_backward(kernel, stride, padding, dilation, ceil):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 8)
    args = (x, kernel, stride, padding, dilation, ceil)
    check_op(aten.max_pool2d_with_indices.default, args)
    out, indices = aten.max_pool2d_with_indices.default(*args)
    check_op(aten.max_pool2d_with_indices_backward.default,
             (torch.randn(*out.shape), x, kernel, stride, padding, dilation, ceil, indices))


def test_max_pool_ties_pick_first_index():
    x = torch.zeros(1, 1, 4, 4)
    check_op(aten.max_pool2d_with_indices.default, (x, [2, 2], [2, 2]))


@pytest.mark.parametrize("ceil,count_include_pad,divisor", [
    (False, True, None), (True, True, None), (True, False, None), (False, False, 3)])
def test_avg_pool2d_and_backward(ceil, count_include_pad, divisor):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 6)
    args = (x, [3, 2], [2, 2], [1, 1], ceil, count_include_pad, divisor)
    check_op(aten.avg_pool2d.default, args)
    out = aten.avg_pool2d.default(*args)
    check_op(aten.avg_pool2d_backward.default, (torch.randn(*out.shape), *args))


@pytest.mark.parametrize("size", [[1, 1], [3, 2], [5, 7]])
def test_adaptive_avg_pool2d_and_backward(size):
    x = torch.randn(2, 3, 7, 6)
    check_op(aten._adaptive_avg_pool2d.default, (x, size))
    out = aten._adaptive_avg_pool2d.default(x, size)
    check_op(aten._adaptive_avg_pool2d_backward.default, (torch.randn(*out.shape), x))
