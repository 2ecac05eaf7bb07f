"""PrivateUse1 kernels for the ATen factories that dispatch on a device, not a tensor.

`empty` makes a lazy zero-filled tensor (it is nearly always overwritten); the
other factories are recorded like any op when they have a lowering and run on
the CPU otherwise, instead of taking ATen's `empty` + `out=` route.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

FACTORIES = (
    "arange",
    "arange.start",
    "arange.start_step",
    "full",
    "zeros",
    "ones",
    "scalar_tensor",
    "linspace",
    "logspace",
    "eye",
    "eye.m",
    "randperm",
    "rand",
    "randn",
    "randint",
    "randint.low",
    # ATen's kernels for these fill an `empty` result through `out=` ops, views and
    # device-specific stubs, which engine tensors cannot take (wrong values, or errors):
    # they are recorded, or computed on the CPU, instead
    "tril_indices",
    "triu_indices",
    "kaiser_window",
    "kaiser_window.periodic",
    "kaiser_window.beta",
    "fft_fftfreq",
    "range",
    "range.step",
)


def _index(device) -> int:
    from torch_xla.lazy import nodes

    return nodes.target_device(device)


def _stored(dtype: torch.dtype | None) -> None:
    """Refuse, when the factory is called, a dtype the device has no element type for
    (torch.complex32); its program would fail only when a sync lowered it."""
    if dtype is not None:
        from torch_xla.lazy import dtype_policy

        dtype_policy.storage(dtype)


_SURELY_FITS = 1 << 30  # bytes: a smaller tensor is not checked against the device's memory


def _fits(t: torch.Tensor, op: str) -> torch.Tensor:
    """`t`, made by factory `op`, unless it is larger than its device's memory: its program
    would then compute for ages where XLA fuses it into its readers (`torch.rand` of
    petabytes, then `.sum()`), or fail only when it runs."""
    size = t.numel() * t.element_size()
    if size > _SURELY_FITS:
        from torch_xla.pjrt.client import client

        limit = client().memory_limit(t.device.index)
        if limit is not None and size > limit:
            from torch_xla.lazy import functional, tensor

            message = (
                f"Out of memory allocating {size} bytes: {op} makes a {t.dtype} tensor of "
                f"shape {list(t.shape)} on {t.device}, whose memory is {limit} bytes. Make it "
                "smaller, or shard it over several devices (torch_xla.distributed.spmd).")
            tensor.uninitialized(functional.unwrap(t))  # no sync computes it
            del t  # nor does the traceback keep it
            raise RuntimeError(message)
    return t


def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    from torch_xla.lazy import functional, nodes, tensor

    dtype = dtype or torch.get_default_dtype()
    _stored(dtype)
    # Left out of syncs until written or read (see `tensor.uninitialized`): `x.to(device)`
    # makes one in a data loader's thread while the main thread may be syncing a step.
    return _fits(functional.wrap(tensor.uninitialized(nodes.full(tuple(size), dtype, 0,
                                                                 _index(device)))), "empty")


def zeros(size, dtype=None, layout=None, device=None, pin_memory=None):
    """Autograd's zero tensors (`_efficientzerotensor`): real zeros here."""
    return empty(size, dtype=dtype, device=device)


def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return empty(size, dtype=dtype, device=device)


def _factory(op):
    def kernel(*args, **kwargs):
        from torch_xla.lazy import dispatch, functional

        _stored(kwargs.get("dtype"))
        return _fits(functional.wrap(dispatch.record_lowered(op, args, kwargs)), str(op))

    return kernel


def _overload(name: str):
    packet, _, overload = name.partition(".")
    return getattr(getattr(aten, packet), overload or "default")


def register(library: torch.library.Library) -> None:
    library.impl("empty.memory_format", empty, "PrivateUse1")
    library.impl("empty_strided", empty_strided, "PrivateUse1")
    library.impl("_efficientzerotensor", zeros, "PrivateUse1")
    for name in FACTORIES:
        library.impl(name, _factory(_overload(name)), "PrivateUse1")
