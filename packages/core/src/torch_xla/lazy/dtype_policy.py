"""Which dtype the device stores for each torch dtype (XLA_USE_BF16 & co).

Tensors always report their PyTorch dtype; only the device buffer uses the
reduced type. The flags are read once, when the engine first loads.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from torch_xla.lowering import dtypes
from torch_xla.pjrt.client import Client, on_start
from torch_xla.plugins import DtypePolicy


def _flag(name: str) -> bool:
    return os.environ.get(name, "0") not in ("", "0")


def _storage_table(policy: DtypePolicy | None = None) -> dict[torch.dtype, np.dtype]:
    table = dict(dtypes.TORCH_TO_JAX)
    bf16 = table[torch.bfloat16]
    if policy is not None:  # what the active plugin's device cannot store
        if policy.f64_as_f32:
            table[torch.float64] = np.dtype(np.float32)
        if policy.f32_as_bf16:
            table[torch.float32] = bf16
        if policy.s16_as_s32:
            table[torch.int16] = np.dtype(np.int32)
    if _flag("XLA_USE_BF16"):  # every float is stored as bfloat16
        table[torch.float32] = bf16
        table[torch.float64] = bf16
    elif _flag("XLA_DOWNCAST_BF16"):  # float32 -> bf16, float64 -> float32
        table[torch.float32] = bf16
        table[torch.float64] = np.dtype(np.float32)
    if _flag("XLA_USE_32BIT_LONG"):
        table[torch.int64] = np.dtype(np.int32)
    return table


STORAGE: dict[torch.dtype, np.dtype] = _storage_table()
NATIVE: dict[torch.dtype, np.dtype] = dict(dtypes.TORCH_TO_JAX)


def _reduced() -> frozenset[torch.dtype]:
    """The torch dtypes whose storage differs from their natural jax dtype."""
    return frozenset(t for t, j in STORAGE.items() if NATIVE[t] != j)


REDUCED: frozenset[torch.dtype] = _reduced()


def apply_plugin_policy(runtime: Client) -> None:
    """Fold the started plugin's `dtype_policy()` into the storage table (in place)."""
    global REDUCED
    STORAGE.update(_storage_table(runtime.plugin.dtype_policy()))
    REDUCED = _reduced()


on_start(apply_plugin_policy)


def storage(dtype: torch.dtype) -> np.dtype:
    return STORAGE[dtype]
