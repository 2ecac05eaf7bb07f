"""`torch.accelerator` (device-agnostic code) when the xla device is the accelerator.

Registering the device makes it torch's current accelerator (unless a CUDA device is
present), but torch's Python device guard for backends written in Python cannot
synchronize ("Backend doesn't support synchronizing all streams on device"), and the
memory statistics ask a caching allocator that the device does not have (an internal
assert, "please report a bug to PyTorch"). So, for the xla device only:

- `synchronize` waits for the device's queued work (`xm.wait_device_ops`), as
  `torch.xla.synchronize` does;
- `empty_cache` does nothing: the runtime keeps no cache of freed buffers to empty;
- the memory statistics raise an error that names `xm.get_memory_info`, the device's
  memory figures where its runtime reports them.

Other accelerators keep torch's functions.
"""

from __future__ import annotations

import functools

import torch
import torch.accelerator
import torch.accelerator.memory

from torch_xla.backend.wrapping import wrap_once

STATISTICS = ("memory_allocated", "max_memory_allocated", "memory_reserved",
              "max_memory_reserved", "memory_stats", "reset_accumulated_memory_stats",
              "reset_peak_memory_stats", "get_memory_info")


def _on_xla() -> bool:
    current = torch.accelerator.current_accelerator()
    return current is not None and current.type == "xla"


def _synchronize(original):
    @functools.wraps(original)
    def synchronize(device=None) -> None:
        if not _on_xla():
            return original(device)
        torch.xla.synchronize(device)

    return synchronize


def _empty_cache(original):
    @functools.wraps(original)
    def empty_cache() -> None:
        if not _on_xla():
            return original()

    return empty_cache


def _statistic(original):
    @functools.wraps(original)
    def statistic(*args, **kwargs):
        if not _on_xla():
            return original(*args, **kwargs)
        raise RuntimeError(
            f"torch.accelerator.{original.__name__}() has no figures for the xla device: "
            "it has no caching allocator. Use torch_xla.core.xla_model.get_memory_info("
            "device) for the memory its runtime reports.")

    return statistic


def register() -> None:
    """Wrap the functions in `torch.accelerator` and `torch.accelerator.memory`
    (idempotent)."""
    wrappers = {"synchronize": _synchronize, "empty_cache": _empty_cache}
    wrappers.update(dict.fromkeys(STATISTICS, _statistic))
    for name, wrap in wrappers.items():
        for module in (torch.accelerator, torch.accelerator.memory):
            wrap_once(module, name, wrap)
