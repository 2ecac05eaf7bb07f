"""Convolution lowerings: forward, transposed and backward, compared with eager."""

import pytest
import torch

from .harness import check_op

aten = torch.ops.aten


CONVS = [
    # (input, weight, stride, padding, dilation, transposed, output_padding, groups)
    ((2, 4, 9, 9), (6, 2, 3, 3), [1, 1], [1, 1], [1, 1], False, [0, 0], 2),
    ((2, 3, 10, 8), (4, 3, 3, 2), [2, 1], [0, 1], [2, 1], False, [0, 0], 1),
    ((1, 4, 7), (4, 2, 3), [2], [1], [1], True, [1], 2),
    ((2, 4, 5, 5), (4, 3, 3, 3), [2, 2], [1, 0], [1, 2], True, [1, 0], 1),
    ((1, 2, 4, 4, 4), (3, 2, 2, 2, 2), [1, 1, 1], [0, 0, 0], [1, 1, 1], False, [0, 0, 0], 1),
]


@pytest.mark.parametrize("case", CONVS, ids=range(len(CONVS)))
def test_convolution_forward_and_backward(case):
    x_shape, w_shape, stride, padding, dilation, transposed, out_pad, groups = case
    torch.manual_seed(0)
    x, w = torch.randn(*x_shape), torch.randn(*w_shape)
    bias = torch.randn(w_shape[1] * groups if transposed else w_shape[0])
    args = (x, w, bias, stride, padding, dilation, transposed, out_pad, groups)
    check_op(aten.convolution.default, args)
    out = aten.convolution.default(*args)
    grad = torch.randn(*out.shape)
    check_op(aten.convolution_backward.default,
             (grad, x, w, [bias.shape[0]], stride, padding, dilation, transposed, out_pad,
              groups, [True, True, True]))
    check_op(aten.convolution_backward.default,
             (grad, x, w, None, stride, padding, dilation, transposed, out_pad, groups,
              [False, True, False]))
