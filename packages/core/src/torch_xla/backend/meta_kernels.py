"""Meta kernels torch lacks for ATen ops.

Fake tensors (dynamo's, AOTAutograd's) compute an op without a meta kernel by running its
real kernel on zero-filled tensors of the fake device. A device whose kernels are written
in Python, as ours are, has none there ("could not find kernel for aten.zero_.default at
dispatch key PrivateUse1"), so `torch.compile(backend='openxla')` stopped at such an op.
Each kernel here gives the output's shape and dtype only; it serves every device.
"""

from __future__ import annotations

import torch


def _fractional_max_pool3d_backward(grad_output, self, kernel_size, output_size, indices):
    """The gradient of the pooled input: its shape and dtype."""
    return self.new_empty(self.shape)


# ATen op -> meta kernel, for the ops torch 2.13 has none for.
KERNELS = {
    "fractional_max_pool3d_backward": _fractional_max_pool3d_backward,
}


def register(library: torch.library.Library) -> None:
    for name, kernel in KERNELS.items():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta"):
            library.impl(name, kernel, "Meta")
