"""View ops in both forms functionalization produces (`view` and `view_copy`, ...), the
scatters that write a view back into its base, and copy/_to_copy."""

import pytest
import torch

from .harness import check_op

aten = torch.ops.aten
X = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)

CASES = [
    (aten.view.default, (X, [12, 5])), (aten.view_copy.default, (X, [-1, 10])),
    (aten._unsafe_view.default, (X, [60])), (aten.alias.default, (X,)),
    (aten.alias_copy.default, (X,)), (aten.t.default, (X[0],)), (aten.t_copy.default, (X[0],)),
    (aten.transpose.int, (X, 0, 2)), (aten.transpose_copy.int, (X, -1, 1)),
    (aten.permute.default, (X, [2, 0, 1])), (aten.permute_copy.default, (X, [1, 2, 0])),
    (aten.expand.default, (X[:, :1], [2, 3, 4, 5])), (aten.expand_copy.default,
                                                      (X[:1], [-1, 4, 5])),
    (aten.slice.Tensor, (X, 1, 1, 3)), (aten.slice_copy.Tensor, (X, 2, -3, None, 2)),
    (aten.slice.Tensor, (X, 0, 5, 10)), (aten.select.int, (X, 1, -1)),
    (aten.select_copy.int, (X, 0, 2)), (aten.squeeze.dim, (X[:, :1], 1)),
    (aten.squeeze_copy.dims, (X[:1, :1], [0, 1])), (aten.unsqueeze.default, (X, -1)),
    (aten.unsqueeze_copy.default, (X, 0)), (aten.diagonal.default, (X, 1, 1, 2)),
    (aten.diagonal_copy.default, (X, -1, 0, 2)), (aten.unfold.default, (X, 2, 2, 1)),
    (aten.unfold_copy.default, (X, 1, 3, 2)),
    (aten.unfold_backward.default, (torch.ones(3, 2, 5, 2), [3, 4, 5], 1, 2, 1)),
    (aten.unfold_backward.default, (torch.tensor([2.5]), [], 0, 1, 1)),
    (aten._conj_copy.default, (X.to(torch.complex64) * (1 - 2j),)),
    (aten.as_strided.default, (X, [4, 3], [1, 4], 2)),
    (aten.as_strided_copy.default, (X, [2, 2], [5, 1])),
    (aten.split_with_sizes.default, (X, [1, 3], 1)),
    (aten.split_with_sizes_copy.default, (X, [2, 3], -1)),
    (aten.split.Tensor, (X, 2, 2)), (aten.split_copy.Tensor, (X, 2)),
    (aten.unbind.int, (X, 1)), (aten.unbind_copy.int, (X,)),
    (aten.view.dtype, (X, torch.int32)),
    (aten.select_scatter.default, (X, torch.ones(3, 5), 1, 2)),
    (aten.slice_scatter.default, (X, torch.ones(3, 2, 5), 1, 1, 5, 2)),
    (aten.diagonal_scatter.default, (X, torch.ones(3, 4), 0, 1, 2)),
    (aten.as_strided_scatter.default, (X, torch.ones(4, 3), [4, 3], [1, 4], 2)),
    (aten.copy.default, (X, torch.ones(5, dtype=torch.int64))),
    (aten.copy.default, (X.int(), X + 0.7)),
    (aten.clone.default, (X,)),
    (aten.lift_fresh_copy.default, (X,)),
    (aten.constant_pad_nd.default, (X, [1, 2, -1, 1], 3.5)),
    (aten.repeat.default, (X[0], [2, 1, 2])),
    (aten.roll.default, (X, [2], [])),
    (aten.flip.default, (X, [0, -1])),
    (aten.cat.default, ([X, torch.ones(3, 1, 5, dtype=torch.int64)], 1)),
    (aten.cat.default, ([torch.zeros(0), X], 0)),
    (aten.stack.default, ([X[0], X[1]], -1)),
]


@pytest.mark.parametrize("op,args", CASES, ids=[f"{i}-{op}" for i, (op, _) in enumerate(CASES)])
def test_view_and_movement(op, args):
    check_op(op, args)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8, torch.bool,
                                   torch.float64, torch.complex64, torch.int64])
def test_to_copy(dtype):
    x = torch.tensor([-2.7, -0.5, 0.0, 0.4, 1.5, 300.0])
    check_op(aten._to_copy.default, (x,), {"dtype": dtype})


def test_to_copy_complex_to_real_drops_imaginary():
    x = torch.tensor([1 + 2j, -3 - 1j])
    check_op(aten._to_copy.default, (x,), {"dtype": torch.float32})
