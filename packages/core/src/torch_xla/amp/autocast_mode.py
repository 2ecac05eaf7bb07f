"""`torch_xla.amp.autocast`: `torch.autocast('xla')` that takes the device, as in PyTorch/XLA.

The casting kernels and op lists live in `torch_xla.backend.autocast`; this
class only chooses the dtype. Without `dtype=` it is the active plugin's
`autocast_dtype()` (bfloat16 unless the plugin says otherwise), read from the
plugin rather than from torch's per-thread default, so every thread gets the
same dtype. A dtype the device does not support (neither bfloat16 nor
float16) disables autocast with a warning, as `torch.autocast` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torch_xla.pjrt.client import client

DEVICE_TYPE = "xla"


def plugin_dtype() -> torch.dtype:
    """The active plugin's autocast dtype (this starts the runtime if it has not)."""
    return client().plugin.autocast_dtype()


def _check_device(device: Any) -> None:
    try:
        device_type = torch.device(device).type
    except (RuntimeError, TypeError):
        device_type = None
    if device_type != DEVICE_TYPE:
        raise ValueError(
            f"torch_xla.amp.autocast is for XLA devices, got device {device!r}. Pass "
            "torch_xla.device(), or use torch.autocast(...) for other devices.")


class autocast(torch.amp.autocast_mode.autocast):  # noqa: N801 - PyTorch/XLA's name
    """`torch.autocast` for an XLA device; usable as a context manager or a decorator.

    `dtype=None` means the active plugin's `autocast_dtype()`.
    """

    def __init__(self, device: torch.device | str, enabled: bool = True,
                 dtype: torch.dtype | None = None, cache_enabled: bool = True) -> None:
        _check_device(device)
        super().__init__(DEVICE_TYPE, dtype=dtype if dtype is not None else plugin_dtype(),
                         enabled=enabled, cache_enabled=cache_enabled)


def custom_fwd(fwd: Callable | None = None, *, cast_inputs: torch.dtype | None = None,
               device_type: str = DEVICE_TYPE) -> Callable:
    """`torch.amp.custom_fwd` with the xla device as the default `device_type`."""
    return torch.amp.custom_fwd(fwd, device_type=device_type, cast_inputs=cast_inputs)


def custom_bwd(bwd: Callable | None = None, *, device_type: str = DEVICE_TYPE) -> Callable:
    """`torch.amp.custom_bwd` with the xla device as the default `device_type`."""
    return torch.amp.custom_bwd(bwd, device_type=device_type)


__all__ = ["autocast", "custom_bwd", "custom_fwd", "plugin_dtype"]
