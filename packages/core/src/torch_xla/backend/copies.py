"""`copy_` and `_to_copy` between the CPU and xla devices, with PyTorch's semantics.

A user's XLA tensor is a functionalization wrapper, so `cpu.copy_(xla)` reaches
PyTorch's functionalization kernel for `copy_`, which refuses to write a
functional tensor into a plain one unless the plain one is on PyTorch's own
`XLA` device type (ours is PrivateUse1). Our kernel takes that one case: it
moves the source to the host and lets the CPU `copy_` do what it always does
(dtype conversion, broadcasting, strided and view destinations). Every other
call goes to PyTorch's kernel, which handles `xla.copy_(anything)` through
the engine's `copy` rule (`lazy/special.py`). PyTorch's `_to_copy` kernel has the
same blind spot, fixed the same way.

`pin_memory()` of a CPU tensor pins for the current accelerator, which is ours once
`torch_xla` is imported, and torch asks a PrivateUse1 backend for a pinned-memory
allocator that its Python hooks cannot provide (a `NotImplementedError` from
`DataLoader(pin_memory=True)`). PJRT copies from any host memory, so pinning for the xla
device returns the tensor as it is; pinning for another device is torch's.

`torch.load(f, map_location='xla')` would move each loaded storage to the device, and
XLA tensors have no storage (torch failed with an AttributeError deep in its storage
code; PyTorch/XLA with "don't know how to restore data location"): a location on the
xla device is refused with what to do instead.
"""

from __future__ import annotations

import torch

from torch_xla.backend import in_place

_original: torch._C._SafeKernelFunction | None = None
_original_to_copy: torch._C._SafeKernelFunction | None = None
_original_pin: torch._C._SafeKernelFunction | None = None
_is_functional = torch._is_functional_tensor


def functional_copy_(keyset, self, src, non_blocking=False):
    """The Functionalize kernel of `aten::copy_`.

    Between two xla tensors of one shape, dtype and device (an optimizer's or a compiled
    graph's write-back, `load_state_dict` on the device) the engine assigns the value
    directly; anything else is PyTorch's kernel, or the host copy below."""
    if _is_functional(self):
        in_place.check_no_internal_overlap(self)
        if (_is_functional(src) and src.device == self.device and src.dtype == self.dtype
                and src.shape == self.shape and self.device.type == "xla"):
            from torch_xla.lazy import functional  # loaded: an xla tensor exists

            value = functional.copied_value(self, src)
            if value is not None:
                torch._functionalize_sync(self)  # PyTorch's kernel syncs `self` first too
                in_place.write_back(self, value)
                return self
        return _original.call_boxed(keyset, self, src, non_blocking)
    if not _is_functional(src) or src.device.type != "xla":
        return _original.call_boxed(keyset, self, src, non_blocking)
    return self.copy_(src.to("cpu"), non_blocking)


def functional_to_copy(keyset, *args, **kwargs):
    """The Functionalize kernel of `aten::_to_copy` (`.to(dtype)`, `.to('xla:1')`, ...).

    PyTorch's wraps the result only for its own `XLA` and `Lazy` device types, so for
    ours it would hand the user a bare engine tensor, whose views lose their writes."""
    out = _original_to_copy.call_boxed(keyset, *args, **kwargs)
    if out.device.type == "xla" and not _is_functional(out):
        return torch._to_functional_tensor(out)
    return out


def pin_memory(keyset, self, device=None):
    """The CPU kernel of `aten::_pin_memory`, which `Tensor.pin_memory` calls."""
    target = device if device is not None else torch.accelerator.current_accelerator()
    if target is not None and torch.device(target).type == "xla":
        return self
    return _original_pin.call_boxed(keyset, self, device)


def _xla_storage_tag(storage) -> None:
    return None  # storages are never on the xla device: our tensors pickle by value


def refuse_xla_location(storage, location: str) -> None:
    """torch.load's deserializer for storage locations on the xla device."""
    if not location.startswith("xla"):
        return None
    raise RuntimeError(
        f"torch.load cannot place tensors on the XLA device (map_location={location!r}): "
        "XLA tensors have no storage to load into. Load onto the CPU "
        "(map_location='cpu') and move what you need with .to(device), or call "
        "model.load_state_dict(state_dict) on a model already on the device, which copies "
        "each tensor there.")


def copy_from(src, dst, non_blocking=False):
    """`dst.copy_(src)` when ATen's CPU copy hands a copy involving an engine tensor over."""
    from torch_xla.lazy import functional, graph, special

    src_inner = functional.unwrap(src) if torch._is_functional_tensor(src) else src
    if dst.device.type == "cpu":
        return dst.copy_(graph.to_cpu(src_inner) if src.device.type == "xla" else src_inner)
    inner = functional.unwrap(dst) if torch._is_functional_tensor(dst) else dst
    inner._set(*special.copied(inner, src_inner))
    return dst


def register(library: torch.library.Library) -> None:
    global _original, _original_to_copy, _original_pin
    _original = torch.library.get_kernel("aten::copy_", "Functionalize")
    _original_to_copy = torch.library.get_kernel("aten::_to_copy", "Functionalize")
    _original_pin = torch.library.get_kernel("aten::_pin_memory", "CPU")
    library.impl("_copy_from", copy_from, "PrivateUse1")
    library.impl("copy_", functional_copy_, "Functionalize", with_keyset=True)
    library.impl("_to_copy", functional_to_copy, "Functionalize", with_keyset=True)
    library.impl("_pin_memory", pin_memory, "CPU", with_keyset=True)
    # ahead of torch's own entry for PrivateUse1 devices (priority 23), which would fail
    torch.serialization.register_package(19, _xla_storage_tag, refuse_xla_location)
