"""PyTorch/XLA's `torch_xla.experimental.custom_kernel`: helpers of its custom kernels.

PyTorch/XLA's module holds Pallas kernels for TPUs (flash and paged attention, grouped
matmul), compiled by JAX's Pallas into Mosaic custom calls for one chip family; this
project's kernels are whatever the device's plugin lowers JAX to, so the module has the
kernels' device-independent helpers: `repeat_with_fixed_output_size`, a
`repeat_interleave` whose output size is fixed when the program is built (XLA needs
static shapes: `torch.repeat_interleave` with a tensor of repeats has a
data-dependent size, which would need the repeats' values on the host).
"""

from __future__ import annotations

import torch


def repeat_with_fixed_output_size(input: torch.Tensor, repeats: torch.Tensor,
                                  total_repeat_length: int) -> torch.Tensor:
    """`torch.repeat_interleave(input, repeats)` cut or padded to `total_repeat_length`
    elements: longer repeats are truncated, and missing elements repeat `input`'s last
    value. `input` and `repeats` are 1-d tensors of equal length; everything stays on
    the device (no value is read on the host)."""
    if input.dim() != 1 or repeats.dim() != 1:
        raise ValueError(f"repeat_with_fixed_output_size takes 1-d input and repeats, got "
                         f"shapes {tuple(input.shape)} and {tuple(repeats.shape)}")
    if input.shape[0] != repeats.shape[0]:
        raise ValueError(f"input has {input.shape[0]} elements but repeats has "
                         f"{repeats.shape[0]}; give one repeat count per element")
    if input.shape[0] == 0:
        raise ValueError("repeat_with_fixed_output_size needs at least one element: the "
                         "output is padded with the input's last value")
    if total_repeat_length < 0:
        raise ValueError(f"total_repeat_length must be >= 0, got {total_repeat_length}")
    # Output position j holds the element whose run of repeats covers j: the number of
    # runs ending at or before j (the cumulative sums are where runs end); positions past
    # the last run take the last element.
    ends = torch.cumsum(repeats, dim=0)
    positions = torch.arange(total_repeat_length, device=input.device, dtype=ends.dtype)
    index = torch.searchsorted(ends, positions, right=True).clamp(max=input.shape[0] - 1)
    return input[index]
