"""Which dtype the device stores for each torch dtype (XLA_USE_BF16 & co).

Tensors always report their PyTorch dtype; only the device buffer uses the
reduced type. As in PyTorch/XLA, each flag is read once, the first time a tensor
of a dtype it affects is stored (so a program may set it after `import torch_xla`,
but not change it afterwards): XLA_USE_BF16 and XLA_DOWNCAST_BF16 on the first
float32/float64 tensor, XLA_USE_32BIT_LONG on the first int64/uint64 one.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from torch_xla.lowering import dtypes
from torch_xla.pjrt.client import Client, on_start
from torch_xla.plugins import DtypePolicy

NATIVE: dict[torch.dtype, np.dtype] = dict(dtypes.TORCH_TO_JAX)
_BF16 = NATIVE[torch.bfloat16]


def _flag(name: str) -> bool:
    return os.environ.get(name, "0") not in ("", "0")


def _float_flags(dtype: torch.dtype) -> np.dtype | None:
    if _flag("XLA_USE_BF16"):  # every float is stored as bfloat16
        return _BF16
    if _flag("XLA_DOWNCAST_BF16"):  # float32 -> bf16, float64 -> float32
        return _BF16 if dtype == torch.float32 else np.dtype(np.float32)
    return None


def _long_flags(dtype: torch.dtype) -> np.dtype | None:
    if _flag("XLA_USE_32BIT_LONG"):
        return np.dtype(np.int32 if dtype == torch.int64 else np.uint32)
    return None


# The dtypes a flag affects, and how that flag maps them (None: the flag is off).
_FLAGGED = {torch.float32: _float_flags, torch.float64: _float_flags,
            torch.int64: _long_flags, torch.uint64: _long_flags}


class UnsupportedDtypeError(TypeError, KeyError):
    """A torch dtype the device has no element type for (torch.complex32, the quantized
    and bit-packed types). A KeyError too: the storage table is a mapping."""

    def __init__(self, dtype: torch.dtype) -> None:
        stored = ", ".join(str(d).removeprefix("torch.") for d in NATIVE)
        hint = " (e.g. .to(torch.complex64))" if dtype == torch.complex32 else ""
        super().__init__(f"{dtype} has no XLA element type; the xla device stores {stored}. "
                         f"Convert the tensor to one of them first{hint}.")

    def __str__(self) -> str:  # KeyError's would quote the message
        return str(self.args[0])


class _Storage(dict):
    """torch dtype -> stored numpy dtype; a flagged dtype is decided on its first lookup."""

    def __init__(self) -> None:
        super().__init__()
        self.policy: DtypePolicy | None = None
        self.latched: dict[torch.dtype, np.dtype | None] = {}
        self._fill()

    def __missing__(self, dtype: torch.dtype) -> np.dtype:
        if dtype not in _FLAGGED:
            raise UnsupportedDtypeError(dtype)
        self.latched[dtype] = _FLAGGED[dtype](dtype)
        self[dtype] = self._decide(dtype)
        return self[dtype]

    def _decide(self, dtype: torch.dtype) -> np.dtype:
        flagged = self.latched.get(dtype)
        if flagged is not None:
            return flagged
        policy = self.policy  # what the active plugin's device cannot store
        if policy is not None:
            if dtype == torch.float64 and policy.f64_as_f32:
                return np.dtype(np.float32)
            if dtype == torch.float32 and policy.f32_as_bf16:
                return _BF16
            if dtype == torch.int16 and policy.s16_as_s32:
                return np.dtype(np.int32)
        return NATIVE[dtype]

    def _fill(self) -> None:
        self.clear()
        for dtype in NATIVE:
            if dtype not in _FLAGGED or dtype in self.latched:
                self[dtype] = self._decide(dtype)

    def apply(self, policy: DtypePolicy) -> None:
        self.policy = policy
        self._fill()


STORAGE: _Storage = _Storage()


def apply_plugin_policy(runtime: Client) -> None:
    """Fold the started plugin's `dtype_policy()` into the storage table (in place)."""
    STORAGE.apply(runtime.plugin.dtype_policy())


on_start(apply_plugin_policy)


def storage(dtype: torch.dtype) -> np.dtype:
    return STORAGE[dtype]

