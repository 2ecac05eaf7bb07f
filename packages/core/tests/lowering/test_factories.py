"""Factory lowerings whose results torch defines by its own rules (arange's length)."""

import pytest
import torch

from .harness import check_op

aten = torch.ops.aten

# (start, end, step): float bounds are truncated for integer dtypes, and int64 takes its
# length from the truncated bounds while narrower integer types take it from the given ones.
RANGES = [(1.0, 5.000001, 2.0), (0.0, -8.000001, -4.0), (0.5, 5.7, 1.5), (3, 10, 3),
          (10, 3, -3), (5, 1, 1), (1.9, -3.9, -1.1), (0, 0.5, 0.1)]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32])
@pytest.mark.parametrize("bounds", RANGES, ids=str)
def test_arange_matches_eager(bounds, dtype):
    try:
        torch.arange(*bounds, dtype=dtype)
    except (RuntimeError, ValueError) as error:  # e.g. int64's step truncated to 0
        pytest.skip(f"eager rejects it: {error}")
    check_op(aten.arange.start_step, bounds, {"dtype": dtype})
