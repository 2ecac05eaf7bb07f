"""PyTorch's DTensor vocabulary for an SPMD layout, both ways.

DTensor describes a layout per *mesh* dim (`Shard(d)`: this mesh dim splits tensor dim
`d`; `Replicate()`); a partition spec describes it per *tensor* dim (the mesh axis, tuple
of axes, or None). The two name the same layouts: a tensor dim split over several mesh
axes is a tuple in the spec and one `Shard` per mesh dim in DTensor, whose `shard_order`
keeps the order of the tuple (the first axis major).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor._dtensor_spec import DTensorSpec, ShardOrderEntry, TensorMeta
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard

import torch_xla.runtime as xr
from torch_xla.distributed.spmd.mesh import Mesh, MeshError, PartitionSpec


class PlacementError(ValueError, IndexError):
    """A `Shard` naming a dim the tensor lacks (an IndexError too, as PyTorch/XLA raises)."""


class UnsupportedPlacementError(ValueError, NotImplementedError):
    """A placement other than `Shard` and `Replicate` (`Partial`): an XLA tensor holds one
    value, never a pending reduction."""


def to_partition_spec(ndim: int, placements: Sequence[Placement], what: str) -> PartitionSpec:
    """The partition spec (one entry per tensor dim) of `placements` (one per mesh dim).

    >>> to_partition_spec(3, [Replicate(), Shard(0)], "f")
    (1, None, None)
    """
    axes: list[list[int]] = [[] for _ in range(ndim)]
    for mesh_dim, placement in enumerate(placements):
        if isinstance(placement, Shard):
            if not -ndim <= placement.dim < ndim:
                raise PlacementError(f"{what}: {placement} on mesh dim {mesh_dim} names dim "
                                     f"{placement.dim}, but the tensor has {ndim} dims.")
            axes[placement.dim % ndim].append(mesh_dim)
        elif not isinstance(placement, Replicate):
            raise UnsupportedPlacementError(
                f"{what}: the placement {type(placement).__name__} ({placement}, on mesh dim "
                f"{mesh_dim}) is not supported on XLA devices; use Shard(dim) or Replicate().")
    return tuple(None if not a else a[0] if len(a) == 1 else tuple(a) for a in axes)


def xla_mesh(dt_mesh: DeviceMesh, what: str) -> Mesh:
    """The `xs.Mesh` of a DTensor `DeviceMesh`: the same device ids, shape and axis names."""
    if dt_mesh.device_type != "xla":
        raise MeshError(f"{what}: the DeviceMesh is of device type {dt_mesh.device_type!r}; "
                        "make it with DeviceMesh('xla', ...) or init_device_mesh('xla', shape).")
    devices = xr.global_runtime_device_count()
    if dt_mesh.size() != devices:
        raise MeshError(f"{what}: the DeviceMesh spans {dt_mesh.size()} devices, but the job "
                        f"has {devices} (xr.global_runtime_device_count()).")
    ids = dt_mesh.mesh
    return Mesh(ids.flatten().tolist(), tuple(ids.size()), dt_mesh.mesh_dim_names)


def device_mesh(mesh: Mesh) -> DeviceMesh:
    """`mesh` as a DTensor `DeviceMesh` of device type xla: the same ids, shape and names."""
    ids = torch.tensor(mesh.device_ids.tolist()).reshape(mesh.mesh_shape)
    return DeviceMesh("xla", ids, mesh_dim_names=mesh.axis_names)


def dtensor_spec(mesh: Mesh, partition_spec: PartitionSpec, tensor: torch.Tensor,
                 dt_mesh: DeviceMesh | None = None) -> DTensorSpec:
    """The `DTensorSpec` of `tensor` laid out as `partition_spec` on `mesh` (on `dt_mesh`,
    the DeviceMesh the caller gave, when there is one)."""
    placements: list[Placement] = [Replicate() for _ in mesh.mesh_shape]
    order = []
    for tensor_dim, entry in enumerate(mesh.translate(partition_spec)):
        if entry is None:
            continue
        mesh_dims = entry if isinstance(entry, tuple) else (entry,)
        for mesh_dim in mesh_dims:
            placements[mesh_dim] = Shard(tensor_dim)
        order.append(ShardOrderEntry(tensor_dim=tensor_dim, mesh_dims=tuple(mesh_dims)))
    meta = TensorMeta(shape=tensor.shape, stride=tensor.stride(), dtype=tensor.dtype)
    return DTensorSpec(dt_mesh if dt_mesh is not None else device_mesh(mesh),
                       tuple(placements), tensor_meta=meta, shard_order=tuple(order))
