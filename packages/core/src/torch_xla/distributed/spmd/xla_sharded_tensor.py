"""`XLAShardedTensor`: an XLA tensor seen with its sharding (what `xs.mark_sharding` returns).

It behaves as the whole (global) tensor: every op on it runs on `global_tensor` and its
XLA results come back wrapped. `local_shards` copies the tiles this process's devices
hold to the host; `load_local_shards_` writes them back.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_map

from torch_xla.distributed.spmd.mesh import ShardingType
from torch_xla.lazy import functional, graph, sharding, transfer


@contextlib.contextmanager
def no_dispatch() -> Iterator[None]:
    """Inside it, ops skip `__torch_dispatch__` subclasses (as PyTorch/XLA's helper does)."""
    guard = torch._C._DisableTorchDispatch()
    try:
        yield
    finally:
        del guard


@dataclasses.dataclass
class XLAShard:
    """One device's tile of a sharded tensor, copied to the host."""

    data: torch.Tensor  # a snapshot of the tile, zero-padded where the tiles are uneven
    indices: Any  # `...` for a replicated tensor, else one slice per dimension (no padding)
    shard_device: str  # the runtime device holding it, e.g. `CPU:3`
    replica_id: int  # which copy of the tile this is (0 unless partially replicated)

    @property
    def unpadded_data(self) -> torch.Tensor:
        """`data` without the zero padding of an uneven tile."""
        if self.indices is Ellipsis:
            return self.data
        return self.data[tuple(slice(0, s.stop - s.start) for s in self.indices)]

    @unpadded_data.setter
    def unpadded_data(self, t: torch.Tensor) -> None:
        if self.indices is Ellipsis:
            self.data[...] = t
        else:
            self.data[tuple(slice(0, s.stop - s.start) for s in self.indices)] = t


class XLAShardedTensor(torch.Tensor):
    """A wrapper around an XLA tensor carrying its sharding; ops see the global tensor."""

    global_tensor: torch.Tensor
    __slots__ = ["global_tensor"]

    @staticmethod
    def __new__(cls, elem: torch.Tensor, *args: Any, **kwargs: Any) -> XLAShardedTensor:
        requires_grad = kwargs.get("requires_grad", False)
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=elem.device,
            requires_grad=requires_grad)
        r.global_tensor = elem.detach() if requires_grad else elem
        return r

    @property
    def local_shards(self) -> list[XLAShard]:
        """The tiles this process's devices hold, copied to the host, by device ordinal."""
        return [XLAShard(*s) for s in local_shards(self.global_tensor)]

    def load_local_shards_(self, shards: list[XLAShard]) -> None:
        """Write `shards` (one per device of this process, as `local_shards` lists them)
        into the tensor's device data, keeping its sharding."""
        load_local_shards(self.global_tensor, [s.data for s in shards],
                          [s.shard_device for s in shards])

    @property
    def sharding_spec(self) -> str:
        return sharding.spec(functional.unwrap(self.global_tensor))

    @property
    def sharding_type(self) -> ShardingType:
        found = sharding_type(self.global_tensor)
        return ShardingType.REPLICATED if found is None else found

    def __repr__(self) -> str:
        if not hasattr(self, "global_tensor"):
            return str(self.cpu())
        return f"XLAShardedTensor({self.global_tensor})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _on_global(func, args, kwargs)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Unwrapped before dispatch, so functionalization and autograd see the global
        # tensor itself (as for any XLA tensor); XLA results come back wrapped.
        with torch._C.DisableTorchFunctionSubclass():
            return _on_global(func, args, kwargs)


def _on_global(func: Any, args: tuple, kwargs: dict | None) -> Any:
    def unwrap(elem: Any) -> Any:
        return elem.global_tensor if isinstance(elem, XLAShardedTensor) else elem

    def wrap(elem: Any) -> Any:
        if (isinstance(elem, torch.Tensor) and not isinstance(elem, XLAShardedTensor)
                and elem.device.type == "xla"):
            return XLAShardedTensor(elem)
        return elem

    return tree_map(wrap, func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {})))


def sharding_type(t: torch.Tensor) -> ShardingType | None:
    """The kind of sharding `t` has, or None when nothing laid it out."""
    text = sharding.spec(functional.unwrap(t))
    if not text:
        return None
    if text == "{replicated}":
        return ShardingType.REPLICATED
    if text == "{manual}":
        return ShardingType.MANUAL
    if text.startswith("{maximal"):
        return ShardingType.MAXIMAL
    if "last_tile_dim_replicate" in text:
        return ShardingType.PARTIAL
    return ShardingType.TILED


def local_shards(t: torch.Tensor) -> list[tuple[torch.Tensor, Any, str, int]]:
    """(data on the host, indices, runtime device, replica id) of each tile this process
    holds, by device ordinal."""
    inner = functional.unwrap(t)
    graph.materialize([inner])
    return [(transfer.from_numpy(host, inner.dtype), indices, device, replica)
            for host, indices, device, replica in sharding.local_shards(inner)]


def load_local_shards(t: torch.Tensor, shards: list[torch.Tensor], devices: list[str]) -> None:
    inner = functional.unwrap(t)
    graph.materialize([inner])
    sharding.load_local_shards(inner, [transfer.to_numpy(s) for s in shards], devices)
