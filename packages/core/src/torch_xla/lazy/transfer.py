"""Host <-> device copies between torch CPU tensors and jax arrays, under the dtype policy.

`to_device` is PyTorch/XLA's `TensorToData` (timed under that name, conversion and copy).
"""

from __future__ import annotations

import time
from typing import Any

import jax
import ml_dtypes
import numpy as np
import torch

from torch_xla import _metrics
from torch_xla.lazy import dtype_policy
from torch_xla.pjrt.client import client

_TENSOR_TO_DATA = _metrics.metric("TensorToData")

# torch dtypes numpy cannot hold natively: moved through an integer view of equal width.
_BIT_VIEWS = {torch.bfloat16: (torch.int16, np.dtype(ml_dtypes.bfloat16))}
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        _BIT_VIEWS[getattr(torch, _name)] = (torch.int8, np.dtype(getattr(ml_dtypes, _name)))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.layout != torch.strided:
        raise NotImplementedError(
            f"XLA tensors are dense: a {t.layout} tensor of shape {tuple(t.shape)} cannot be "
            "placed on the XLA device (PyTorch/XLA has no sparse tensors either). Call "
            "`.to_dense()` first; for nn.Embedding and nn.EmbeddingBag pass sparse=False.")
    t = t.detach().resolve_conj().resolve_neg()
    view = _BIT_VIEWS.get(t.dtype)
    if view is not None:
        return t.contiguous().view(view[0]).numpy().view(view[1])
    return t.numpy()


def from_numpy(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A tensor of `dtype` sharing `array`'s memory where the types allow: `array` is
    the caller's own (`Client.to_host` gives such arrays), so no copy is made here."""
    view = _BIT_VIEWS.get(dtype)
    if view is not None and array.dtype == view[1]:
        bits = array.view(np.dtype(f"int{8 * array.itemsize}"))
        return torch.from_numpy(bits).view(dtype)
    if array.dtype != dtype_policy.NATIVE[dtype]:  # a reduced storage type: back to torch's
        return from_numpy(
            array.astype(dtype_policy.NATIVE[dtype])
            if dtype not in _BIT_VIEWS
            else array.astype(_BIT_VIEWS[dtype][1]),
            dtype,
        )
    return torch.from_numpy(array)


def to_device(t: torch.Tensor, index: int, layout: Any = None, local: bool = False
              ) -> jax.Array:
    runtime = client()  # started first: starting applies the plugin's dtype policy
    start = time.perf_counter()
    moved = runtime.to_device(host_copy(t), index, layout, local)
    _TENSOR_TO_DATA.add(time.perf_counter() - start)
    return moved


def host_copy(t: torch.Tensor) -> np.ndarray:
    """`t`'s value as the NumPy array of its storage type that `to_device` sends: a copy
    either way, since the CPU client may alias host memory and the tensor may change."""
    client()  # started first: starting applies the plugin's dtype policy
    array = to_numpy(t)
    wanted = dtype_policy.STORAGE[t.dtype]
    return array.astype(wanted) if array.dtype != wanted else np.array(array, copy=True)


def to_host(array: jax.Array, dtype: torch.dtype) -> torch.Tensor:
    return from_numpy(client().to_host(array), dtype)
