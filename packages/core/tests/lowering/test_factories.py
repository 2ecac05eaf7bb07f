"""Factory lowerings whose results torch defines by its own rules (arange's length)."""

import pytest
import torch

from .harness import check_op

aten = torch.ops.aten

# (start, end, step): float bounds are truncated for integer dtypes, and int64 takes its
# length from the truncated bounds while narrower integer types take it from the given ones.
RANGES = [(1.0, 5.000001, 2.0), (0.0, -8.000001, -4.0), (0.5, 5.7, 1.5), (3, 10, 3),
          (10, 3, -3), (1.9, -3.9, -1.1), (0, 0.5, 0.1)]


DTYPES = [torch.int64, torch.int32, torch.uint8, torch.float32]


def _eager_accepts(bounds, dtype) -> bool:
    try:
        torch.arange(*bounds, dtype=dtype)
    except (RuntimeError, ValueError):  # e.g. int64's step truncated to 0
        return False
    return True


# Only the cases eager computes (eager is the oracle): no skipped parameters.
CASES = [(b, d) for b in RANGES for d in DTYPES if _eager_accepts(b, d)]


@pytest.mark.parametrize("bounds, dtype", CASES, ids=str)
def test_arange_matches_eager(bounds, dtype):
    check_op(aten.arange.start_step, bounds, {"dtype": dtype})


def test_the_cases_cover_every_range_and_dtype():
    assert {b for b, _ in CASES} == set(RANGES) and {d for _, d in CASES} == set(DTYPES)
