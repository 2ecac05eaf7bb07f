"""The `xla` device: PyTorch's PrivateUse1 backend renamed, with its guard, hooks,
device module (`torch.xla`), factory, copy and in-place kernels, the autograd engine tweak,
inductor's refusal of it, quiet forks for `DataLoader` workers, `torch.accelerator`
on it, and `clip_grad_norm_`'s zero on it.

`register()` runs once, when `torch_xla` is imported; it creates no PJRT client.
"""

from __future__ import annotations

import warnings

import torch

from torch_xla import _corrected_decompositions
from torch_xla.backend import (
    accelerator,
    autocast,
    autograd,
    clip_grad,
    copies,
    data_loader,
    factories,
    host_arguments,
    in_place,
    inductor,
    meta_kernels,
    optimizer_ops,
)
from torch_xla.backend.device_module import XlaDeviceModule

NAME = "xla"
_library: torch.library.Library | None = None  # our kernels for ATen ops


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


_PRIVATE_USE1 = torch._C._autograd.DeviceType.PrivateUse1


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):  # called from C++ twice per op that autograd records: kept cheap
        autograd.take_pending_error()  # C++ may call it while an error unwinds
        return _PRIVATE_USE1


def _is_xla(self: torch.Tensor) -> bool:
    """Is True if the Tensor is stored on the xla device."""
    return self.device.type == NAME


def register() -> None:
    """Make `torch.device('xla', n)` an XLA device of this package (idempotent)."""
    global _library
    if _library is not None:
        return
    if torch._C._get_privateuse1_backend_name() != NAME:
        torch.utils.rename_privateuse1_backend(NAME)
    torch._register_device_module(NAME, XlaDeviceModule())
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    _library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # replacing some of torch's kernels is the point
        warnings.filterwarnings("ignore", "Warning only once for all operators")
        factories.register(_library)
        copies.register(_library)
        optimizer_ops.register(_library)
        in_place.register(_library, skip=host_arguments.IN_PLACE)
        host_arguments.register(_library)
        autocast.register(_library)
        meta_kernels.register(_library)
    autograd.register()
    _corrected_decompositions.install(NAME)
    # torch's `Tensor.is_xla` tests its built-in XLA device type, never ours; PyTorch/XLA
    # users read it as "on the xla device", and no torch code reads it.
    torch.Tensor.is_xla = property(_is_xla)
    inductor.register()
    data_loader.register()
    accelerator.register()
    clip_grad.register()
