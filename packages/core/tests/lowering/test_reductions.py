"""Reductions the OpInfo samples cover thinly, compared with the eager ATen op."""

import pytest
import torch

from .harness import check_op

aten = torch.ops.aten

SPECIAL_FLOATS = [0.0, -0.0, 1.5, -2.25, float("inf"), -float("inf"), float("nan"), 1e-40,
                  -3e-45, 1.17549435e-38, 3.4e38]


@pytest.mark.parametrize("value", SPECIAL_FLOATS)
def test_hash_tensor_widens_float32_bits_exactly(value):
    """float32 -> float64 bits by integer ops, subnormals and NaN included."""
    check_op(aten.hash_tensor.default, (torch.tensor([value, 1.0]),))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64,
                                   torch.int64, torch.int8, torch.uint8, torch.int32,
                                   torch.bool])
def test_hash_tensor_dtypes_and_dims(dtype):
    torch.manual_seed(0)
    x = (torch.randn(3, 4, 5) * 100).to(dtype)
    check_op(aten.hash_tensor.default, (x,))
    check_op(aten.hash_tensor.default, (x, [0, 2]), {"keepdim": True})
    check_op(aten.hash_tensor.default, (x, [1]))


SEGMENT_DATA = torch.tensor([[1.0, -2.0], [0.0, 3.0], [3.0, 3.0], [float("nan"), 0.0],
                             [2.0, 0.0], [-1.0, 5.0], [4.0, 0.5]])


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("initial", [None, 2.0])
@pytest.mark.parametrize("by", ["lengths", "offsets"])
def test_segment_reduce_and_backward(reduce, initial, by):
    """Empty segments, ties, zeros and NaN (the backward's special cases)."""
    lengths = torch.tensor([2, 0, 1, 2, 2])
    given = lengths if by == "lengths" else torch.cat([torch.zeros(1, dtype=torch.int64),
                                                       lengths.cumsum(0)])
    for data in (SEGMENT_DATA, SEGMENT_DATA.nan_to_num(1.0), SEGMENT_DATA.abs() + 1):
        kwargs = {by: given, "axis": 0, "initial": initial}
        check_op(aten.segment_reduce.default, (data, reduce), kwargs)
        out = aten.segment_reduce.default(data, reduce, **kwargs)
        grad = torch.linspace(-1, 2, out.numel()).reshape(out.shape)
        check_op(aten._segment_reduce_backward.default, (grad, out, data, reduce),
                 {by: given, "axis": 0, "initial": initial})


def test_segment_reduce_along_a_later_axis():
    data = torch.randn(2, 5, 3)
    lengths = torch.tensor([[2, 3], [0, 5]])
    for reduce in ("sum", "max", "mean"):
        check_op(aten.segment_reduce.default, (data, reduce), {"lengths": lengths, "axis": 1})
        out = aten.segment_reduce.default(data, reduce, lengths=lengths, axis=1)
        check_op(aten._segment_reduce_backward.default, (torch.randn(out.shape), out, data,
                                                         reduce), {"lengths": lengths, "axis": 1})


@pytest.mark.parametrize("n", [1, 2, 3, 8, 33])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_kthvalue_ties_resolve_as_eager(n, dtype):
    """Both value and index: the lowering runs torch's quickselect, so among tied values
    it returns the index eager returns."""
    torch.manual_seed(n)
    x = torch.randint(0, 3, (6, n)).to(dtype)
    if dtype == torch.float32:
        x[0, n // 2] = float("nan")
    for k in sorted({1, (n + 1) // 2, n}):
        check_op(aten.kthvalue.default, (x, k, 1))
    check_op(aten.kthvalue.default, (x.t().contiguous(), (n + 1) // 2, 0, True))
