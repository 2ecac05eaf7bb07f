"""DLPack exchange of XLA tensors (PyTorch/XLA's `torch_xla.utils.dlpack`).

- `to_dlpack(xla_tensor)`: a DLPack capsule over the tensor's device buffer (no copy;
  a pending tensor is computed first). Its element type is the one the device stores.
- `from_dlpack(ext)`: an XLA tensor over the memory of `ext`, a DLPack capsule or any
  object with `__dlpack__` (a CPU or device `torch.Tensor`, a jax or NumPy array), with
  no copy when that memory belongs to one of this process's XLA devices; otherwise (host
  memory under an accelerator plugin, an element type the device stores differently)
  the value is copied to the current device.

Shared memory is shared: writing to `ext` in place afterwards changes the XLA tensor,
which the engine takes to be immutable, as with PyTorch/XLA. A capsule can be consumed
once.
"""

from __future__ import annotations

from typing import Any

import jax
import torch
import torch.utils.dlpack

from torch_xla.lazy import dtype_policy, functional, graph, nodes, transfer
from torch_xla.lazy.tensor import XLATensor, device_index
from torch_xla.pjrt.client import client


def to_dlpack(xla_tensor: torch.Tensor) -> Any:
    """A DLPack capsule over `xla_tensor`'s device buffer."""
    if not isinstance(xla_tensor, torch.Tensor) or xla_tensor.device.type != "xla":
        raise TypeError(f"to_dlpack takes an XLA tensor, got {type(xla_tensor).__name__} on "
                        f"{getattr(xla_tensor, 'device', None)}; use torch.utils.dlpack for "
                        "other tensors.")
    t = functional.unwrap(xla_tensor)
    graph.materialize([t])
    graph.check_not_donated([t._node])
    return t._node.array.__dlpack__()


def from_dlpack(ext: Any) -> torch.Tensor:
    """An XLA tensor over the memory of `ext` (see the module)."""
    try:
        # torch reads any producer's capsule and keeps it alive; jax then shares its memory
        host = ext if isinstance(ext, torch.Tensor) else torch.utils.dlpack.from_dlpack(ext)
    except RuntimeError as error:
        if "invalid capsule" not in str(error):
            raise
        raise RuntimeError("from_dlpack: this DLTensor capsule can be consumed only once, "
                           "and it has been; make a new one with to_dlpack.") from error
    if host.device.type == "xla":
        return host
    runtime = client()
    array = jax.dlpack.from_dlpack(host)
    ours = {d: k for k, d in enumerate(runtime.devices)}
    index = ours.get(next(iter(array.devices())))
    if index is None or array.dtype != dtype_policy.STORAGE[host.dtype]:
        index = device_index(None) if index is None else index
        return functional.wrap(XLATensor(nodes.data(
            transfer.to_device(host.cpu(), index), host.dtype, index)))
    return functional.wrap(XLATensor(nodes.data(array, host.dtype, index)))
