"""`torch_xla.experimental.custom_kernel.repeat_with_fixed_output_size`. Reference:
`torch.repeat_interleave` on the CPU, cut or padded with the last value."""

from __future__ import annotations

import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met
from torch_xla.experimental.custom_kernel import repeat_with_fixed_output_size


def reference(values, repeats, total):
    base = torch.repeat_interleave(values, repeats)[:total]
    return torch.cat([base, values[-1:].expand(total - base.shape[0])])


@pytest.mark.parametrize("repeats,total", [
    ([0, 1, 2, 0, 4, 0, 6, 7, 8, 9], 20),      # truncated
    ([0, 5, 2, 0, 4, 9, 6, 7, 8, 0], 100),     # padded with the last value
    ([3, 6, 2, 14, 27, 47, 8, 28, 0, 1], 135),
    ([0] * 10, 4),                              # no repeats at all
    ([1] * 10, 0),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_matches_repeat_interleave_on_the_device(repeats, total, dtype):
    values = (torch.randn(10) * 10).to(dtype)
    repeats = torch.tensor(repeats)
    device = torch_xla.device()
    met.clear_all()
    out = repeat_with_fixed_output_size(values.to(device), repeats.to(device), total)
    torch_xla.sync()
    assert not [n for n in met.counter_names() if n.startswith("aten::")]  # no CPU fallback
    assert out.shape == (total,) and out.dtype == dtype
    assert torch.equal(out.cpu(), reference(values, repeats, total))


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="takes 1-d input and repeats"):
        repeat_with_fixed_output_size(torch.ones(2, 2), torch.ones(2, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="one repeat count per element"):
        repeat_with_fixed_output_size(torch.ones(3), torch.ones(2, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="at least one element"):
        repeat_with_fixed_output_size(torch.ones(0), torch.ones(0, dtype=torch.long), 3)
