"""`XLAShardedTensor`: an XLA tensor seen with its sharding (what `xs.mark_sharding` returns).

It behaves as the whole (global) tensor: every op on it runs on `global_tensor` and its
XLA results come back wrapped. `local_shards` copies the tiles this process's devices
hold to the host; `load_local_shards_` writes them back.

It also speaks DTensor's language, as PyTorch/XLA's does: the mesh and partition spec it
was laid out with (`mesh_shape`, `partition_spec`, set by `mark_sharding`,
`distribute_tensor` and the constructor) give `_spec`, `placements` and `device_mesh`;
`redistribute` lays it out anew. `to_local()` is the global tensor: under SPMD one
program computes on the whole tensor and XLA's partitioner splits it, so there is no
per-process piece to hand out. Op results carry no layout of their own (the partitioner
chooses theirs): their `_spec` raises.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor.placement_types import Placement
from torch.utils._pytree import tree_map

from torch_xla.distributed.spmd.mesh import (
    Mesh,
    MeshError,
    PartitionSpec,
    ShardingType,
    job_mesh,
    spec_sharding,
)
from torch_xla.distributed.spmd.placements import dtensor_spec, to_partition_spec, xla_mesh
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
    """A wrapper around an XLA tensor carrying its sharding; ops see the global tensor.

    `XLAShardedTensor(t, mesh_shape=None, partition_spec=None, requires_grad=None)`
    records the layout `t` has (it moves and marks nothing: `xs.mark_sharding` and
    `distribute_tensor` do): `mesh_shape` is a tuple of ints, an `xs.Mesh` or a DTensor
    `DeviceMesh`; `partition_spec` a partition spec, or DTensor placements (one per mesh
    dim). `requires_grad` defaults to `t`'s, and gradients flow into `t`.
    """

    global_tensor: torch.Tensor
    mesh_shape: tuple[int, ...] | None
    partition_spec: PartitionSpec | None
    __slots__ = ["global_tensor", "mesh_shape", "partition_spec", "_cached_spec", "_mesh",
                 "_device_mesh"]

    @staticmethod
    def __new__(cls, elem: torch.Tensor, mesh_shape: Any = None, partition_spec: Any = None,
                *args: Any, **kwargs: Any) -> XLAShardedTensor:
        inner, requires_grad = _autograd_inner(unwrap_sharded_tensor(elem),
                                               kwargs.get("requires_grad"))
        r = torch.Tensor._make_wrapper_subclass(
            cls, inner.size(), strides=inner.stride(), storage_offset=inner.storage_offset(),
            dtype=inner.dtype, layout=inner.layout, device=inner.device,
            requires_grad=requires_grad)
        r.global_tensor = inner
        r.mesh_shape = r.partition_spec = r._mesh = r._device_mesh = r._cached_spec = None
        if isinstance(elem, XLAShardedTensor):
            r.mesh_shape, r.partition_spec = elem.mesh_shape, elem.partition_spec
            r._mesh, r._device_mesh = elem._mesh, elem._device_mesh
        r.set_layout(mesh_shape, partition_spec)
        return r

    def set_layout(self, mesh: Any, partition_spec: Any) -> None:
        """Record the mesh (a shape, `xs.Mesh` or `DeviceMesh`) and partition spec (or
        placements) the tensor is laid out with; None keeps what is recorded."""
        if mesh is not None:
            self._device_mesh = mesh if isinstance(mesh, DeviceMesh) else None
            self._mesh = (xla_mesh(mesh, "XLAShardedTensor") if isinstance(mesh, DeviceMesh)
                          else mesh if isinstance(mesh, Mesh) else None)
            self.mesh_shape = (self._mesh.mesh_shape if self._mesh is not None
                               else tuple(int(s) for s in mesh))
        if partition_spec is not None:
            self.partition_spec = (
                to_partition_spec(self.global_tensor.dim(), partition_spec, "XLAShardedTensor")
                if any(isinstance(p, Placement) for p in partition_spec)
                else tuple(partition_spec))
        self._cached_spec = None

    # --- DTensor's view of the layout ------------------------------------------------

    @property
    def _spec(self) -> DTensorSpec:
        """The layout as a DTensor `DTensorSpec` (cached until the layout changes)."""
        if self._cached_spec is None:
            self._cached_spec = dtensor_spec(self._layout_mesh(), self.partition_spec,
                                             self.global_tensor, self._device_mesh)
        return self._cached_spec

    def _layout_mesh(self) -> Mesh:
        if self.mesh_shape is None or self.partition_spec is None:
            missing = "mesh_shape" if self.mesh_shape is None else "partition_spec"
            raise ValueError(
                f"XLAShardedTensor: no {missing} recorded, so there is no DTensor spec: the "
                "tensor was not laid out by mark_sharding or distribute_tensor (results of "
                "ops are laid out by XLA's partitioner). Record the layout with "
                "xs.wrap_as_sharded_tensor(t, mesh_shape, partition_spec).")
        if self._mesh is None:
            self._mesh = Mesh(np.arange(math.prod(self.mesh_shape)), self.mesh_shape)
        return self._mesh

    @property
    def placements(self) -> tuple[Placement, ...]:
        """DTensor placements of the layout: one `Shard(dim)` or `Replicate()` per mesh dim."""
        try:
            return self._spec.placements
        except (ValueError, MeshError) as e:
            raise ValueError(f"XLAShardedTensor: placements are not available: {e}") from e

    @property
    def device_mesh(self) -> DeviceMesh:
        return self._spec.mesh

    def invalidate_spec_cache(self) -> None:
        self._cached_spec = None

    def to_local(self) -> torch.Tensor:
        """The global tensor (an SPMD program's view of its data; see the module's doc)."""
        return self.global_tensor

    def full_tensor(self) -> torch.Tensor:
        return self.global_tensor

    def redistribute(self, device_mesh: Mesh | DeviceMesh, placements: list[Placement], *,
                     async_op: bool = False) -> XLAShardedTensor:
        """The tensor laid out as `placements` on `device_mesh` (an `xs.Mesh` or a DTensor
        `DeviceMesh`) from the next program on. In place, unless `async_op` asks for a
        copy laid out anew (the original keeps its layout)."""
        what = "XLAShardedTensor.redistribute"
        mesh = xla_mesh(device_mesh, what) if isinstance(device_mesh, DeviceMesh) else device_mesh
        if len(placements) != len(mesh.mesh_shape):
            raise ValueError(f"{what}: {len(placements)} placements for a mesh of "
                             f"{len(mesh.mesh_shape)} dims {mesh.mesh_shape}; give one per "
                             "mesh dim.")
        spec = to_partition_spec(self.global_tensor.dim(), placements, what)
        target = self.global_tensor.clone() if async_op else self.global_tensor
        relayout(target, mesh, spec, what)
        out = self if target is self.global_tensor else XLAShardedTensor(target)
        out.set_layout(device_mesh, spec)
        return out

    @property
    def local_shards(self) -> list[XLAShard]:
        """The tiles this process's devices hold, copied to the host, by device ordinal."""
        return [XLAShard(*s) for s in local_shards(self.global_tensor)]

    def load_local_shards_(self, shards: list[XLAShard]) -> None:
        """Write `shards` (one per device of this process, as `local_shards` lists them)
        into the tensor's device data, keeping its sharding."""
        load_local_shards(self.global_tensor, [s.data for s in shards],
                          [s.shard_device for s in shards])
        self.invalidate_spec_cache()

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


def unwrap_sharded_tensor(t: Any) -> Any:
    return t.global_tensor if isinstance(t, XLAShardedTensor) else t


def _autograd_inner(elem: torch.Tensor, requires_grad: bool | None
                    ) -> tuple[torch.Tensor, bool]:
    """The tensor a wrapper holds and whether it requires grad: `elem` itself when the
    wrapper wants what `elem` has (so gradients reach `elem`), a fresh leaf when it asks
    for gradients `elem` does not take, `elem` detached when it refuses them."""
    if requires_grad is None or requires_grad == elem.requires_grad:
        return elem, elem.requires_grad
    return (elem.detach().requires_grad_() if requires_grad else elem.detach()), requires_grad


def on_device(t: Any, what: str) -> torch.Tensor:
    """`t` (unwrapped), checked to be a tensor on the XLA device."""
    t = unwrap_sharded_tensor(t)
    if not isinstance(t, torch.Tensor) or t.device.type != "xla":
        where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{what}: expected a tensor on the XLA device, got one on {where}; "
                        "move it first with `t.to(torch_xla.device())`.")
    return t


def relayout(t: torch.Tensor, mesh: Mesh | None, partition_spec: PartitionSpec, what: str
             ) -> Mesh:
    """Ask for `t`'s value laid out as `partition_spec` on `mesh` inside the next program,
    without moving the data it holds now (`xs.annotate_custom_sharding`); the mesh used
    (the global one when `mesh` is None)."""
    sharding.check_spmd(what)
    mesh = job_mesh(mesh, what)
    target = on_device(t, what)
    sharding.mark_custom(target, spec_sharding(mesh, partition_spec, target.shape, what))
    return mesh


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
