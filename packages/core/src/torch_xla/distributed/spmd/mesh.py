"""Device meshes and partition specs of SPMD (PyTorch/XLA's `xs.Mesh` & co), as jax shardings.

A `Mesh` arranges the job's device ids (global runtime ordinals) in a logical
n-d array with optional axis names; a partition spec says, per tensor dim, which
mesh axis (an index, a name, or a tuple of them) shards it, `None` replicating
it. Both are plain data here; `Mesh.sharding(spec)` turns them into the
`jax.sharding.NamedSharding` that XLA's partitioner consumes, so no sharding
arithmetic of our own stands between the user's annotation and the compiler.

`tile_assignment(spec)` is PyTorch/XLA's view of the same sharding (which device
holds each tile), kept for the debugging helpers and for tests that compare the
two: the device jax places each shard on must be the device PyTorch/XLA names.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh as JaxMesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as JaxSpec

import torch_xla.runtime as xr
from torch_xla import _metrics
from torch_xla.pjrt import spmd
from torch_xla.pjrt.client import client

# A partition spec: per tensor dim, a mesh axis (index or name), a tuple of them, or None.
PartitionSpec = tuple


class MeshError(ValueError, AssertionError):
    """A mesh that cannot be built (an AssertionError too, as PyTorch/XLA raises)."""


class ShardingType(enum.IntEnum):
    """PyTorch/XLA's names for the kinds of sharding (XLA's OpSharding types)."""

    REPLICATED = 0
    MAXIMAL = 1
    TUPLE = 2
    TILED = 3
    MANUAL = 4
    PARTIAL = 5
    UNKNOWN = 6


class Mesh:
    """`device_ids` (global runtime ordinals, in any order) reshaped to `mesh_shape`.

    >>> mesh = Mesh(np.arange(8), (4, 2), ("data", "model"))
    >>> mesh.shape()
    OrderedDict([('data', 4), ('model', 2)])
    """

    device_ids: np.ndarray
    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...] | None

    def __init__(self, device_ids: np.ndarray | Sequence[int], mesh_shape: Sequence[int],
                 axis_names: Sequence[str] | None = None) -> None:
        ids = np.asarray(device_ids).reshape(-1)
        shape = tuple(int(s) for s in mesh_shape)
        names = None if axis_names is None else tuple(axis_names)
        if names is not None and len(names) != len(shape):
            raise MeshError(f"Mesh: Number of axis names {len(names)} {names} must match mesh "
                            f"dimensions {len(shape)} (mesh_shape {shape}); give one name per "
                            "mesh axis.")
        if names is not None and len(set(names)) != len(names):
            raise MeshError(f"Mesh: Axis names must be unique, got {names}.")
        if len(ids) != math.prod(shape):
            raise MeshError(f"Mesh: Number of device IDs ({len(ids)}) must match mesh size "
                            f"({math.prod(shape)} for mesh_shape {shape}).")
        if len(np.unique(ids)) != len(ids):
            raise MeshError(f"Mesh: Device IDs must be unique, got {ids.tolist()}.")
        if ids.size and (ids.min() < 0 or ids.max() >= len(ids)):
            raise MeshError(f"Mesh: Device IDs must be less than mesh size ({len(ids)}): "
                            f"expected the global runtime ordinals 0..{len(ids) - 1}, got "
                            f"{ids.tolist()}.")
        if spmd.enabled() and len(ids) != xr.global_runtime_device_count():
            raise MeshError(f"Mesh: Number of device IDs ({len(ids)}) must match the global "
                            f"number of devices ({xr.global_runtime_device_count()}): an SPMD mesh "
                            "spans every device of the job (xr.global_runtime_device_count()).")
        self.device_ids = ids
        self.mesh_shape = shape
        self.axis_names = names

    def size(self) -> int:
        return math.prod(self.mesh_shape)

    def shape(self) -> OrderedDict:
        keys = self.axis_names if self.axis_names is not None else range(len(self.mesh_shape))
        return OrderedDict(zip(keys, self.mesh_shape, strict=True))

    def get_logical_mesh(self) -> np.ndarray:
        return self.device_ids.reshape(self.mesh_shape)

    def get_axis_name_idx(self, name: str) -> int | None:
        if self.axis_names is None or name not in self.axis_names:
            return None
        return self.axis_names.index(name)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Mesh) and self.mesh_shape == other.mesh_shape
                and self.axis_names == other.axis_names
                and np.array_equal(self.device_ids, other.device_ids))

    def __hash__(self) -> int:
        return hash((tuple(self.device_ids.tolist()), self.mesh_shape, self.axis_names))

    def __repr__(self) -> str:
        return (f"Mesh(device_ids={self.device_ids.tolist()}, mesh_shape={self.mesh_shape}, "
                f"axis_names={self.axis_names})")

    def __str__(self) -> str:
        """`(device_ids, mesh_shape, axis_names)` as Python literals: `Mesh.from_str` reads
        it back (a mesh passed through a custom op's string argument)."""
        return str((self.device_ids.tolist(), self.mesh_shape, self.axis_names))

    @classmethod
    def from_str(cls, text: str) -> Mesh | None:
        """The mesh `str(mesh)` wrote, or None when `text` is not such a string."""
        try:
            device_ids, mesh_shape, axis_names = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError):
            return None
        return cls(np.asarray(device_ids), mesh_shape, axis_names)

    # --- partition specs ------------------------------------------------------------

    def translate(self, partition_spec: PartitionSpec) -> tuple:
        """`partition_spec` with axis names replaced by mesh axis indices, checked."""
        return _checked(self, _translate(self, tuple(partition_spec)))

    def tile_assignment(self, partition_spec: PartitionSpec) -> np.ndarray:
        """The devices holding each tile (PyTorch/XLA's tile assignment): the logical mesh
        transposed so the sharding axes come first (in spec order), grouped axes merged;
        trailing axes are the replicas of a partially replicated tensor."""
        return _tile_assignment(self, self.translate(partition_spec))

    def sharding_type(self, partition_spec: PartitionSpec) -> ShardingType:
        spec = self.translate(partition_spec)
        if self.size() == 1:
            return ShardingType.MAXIMAL
        if all(d is None for d in spec):
            return ShardingType.REPLICATED
        if len(_tile_assignment(self, spec).shape) > len(spec) or any(d is None for d in spec):
            return ShardingType.PARTIAL
        return ShardingType.TILED

    def jax_mesh(self, devices: Sequence[Any]) -> Any:
        """This mesh over `devices` (jax devices indexed by global runtime ordinal)."""
        return _jax_mesh(self, tuple(devices))

    def get_jax_mesh(self) -> Any:
        """This mesh as a `jax.sharding.Mesh` over the job's devices, in the same order
        (for jax code run on the same devices, e.g. `xb.call_jax` with `shard_map`)."""
        return self.jax_mesh(client().global_devices)

    def sharding(self, partition_spec: PartitionSpec, devices: Sequence[Any]) -> Any:
        """The `jax.sharding.NamedSharding` of `partition_spec` on this mesh."""
        return NamedSharding(self.jax_mesh(devices), self.jax_spec(partition_spec))

    def get_op_sharding(self, partition_spec: PartitionSpec) -> Any:
        """The sharding `partition_spec` names on this mesh over the job's devices (a jax
        `NamedSharding`; PyTorch/XLA returns its OpSharding here, and every function
        that takes one accepts this)."""
        key = (tuple(partition_spec), tuple(client().global_devices))
        cache = self.__dict__.setdefault("_op_shardings", {})
        found = cache.get(key)
        if found is None:  # once per mesh object and spec, as PyTorch/XLA caches them
            _CREATE_OP_SHARDING.inc()
            found = cache[key] = self.sharding(*key)
        return found

    def jax_spec(self, partition_spec: PartitionSpec) -> Any:
        names = _jax_axis_names(self)
        entries = []
        for d in self.translate(partition_spec):
            if d is None:
                entries.append(None)
            elif isinstance(d, tuple):
                entries.append(tuple(names[i] for i in d))
            else:
                entries.append(names[d])
        return JaxSpec(*entries)


_CREATE_OP_SHARDING = _metrics.counter("CreateOpSharding")


def _jax_axis_names(mesh: Mesh) -> tuple[str, ...]:
    """jax needs names: the mesh's own, or `axis_0`, `axis_1`, ... for an unnamed mesh."""
    if mesh.axis_names is not None:
        return mesh.axis_names
    return tuple(f"axis_{i}" for i in range(len(mesh.mesh_shape)))


@functools.lru_cache(maxsize=64)
def _jax_mesh(mesh: Mesh, devices: tuple) -> Any:
    if len(devices) != mesh.size():
        raise ValueError(f"{mesh} spans {mesh.size()} devices, but the job has {len(devices)}: "
                         "build the mesh over xr.global_runtime_device_count() devices.")
    grid = np.array([devices[i] for i in mesh.device_ids], dtype=object)
    return JaxMesh(grid.reshape(mesh.mesh_shape), _jax_axis_names(mesh))


def _translate(mesh: Mesh, spec: tuple, nested: bool = False) -> tuple:
    out: list = []
    for p in spec:
        if isinstance(p, tuple):
            if nested:
                raise ValueError(f"Partition spec cannot contain nested tuples: {spec}.")
            out.append(_translate(mesh, p, nested=True))
        elif p is None or (isinstance(p, int) and not isinstance(p, bool)):
            out.append(p)
        elif isinstance(p, str):
            idx = mesh.get_axis_name_idx(p)
            if idx is None:
                raise ValueError(f"Axis name {p} is not defined in the given mesh "
                                 f"(axis names: {mesh.axis_names}).")
            out.append(idx)
        else:
            raise ValueError(f"Spec type {type(p)} is not supported in partition spec "
                             "(use mesh axis indices, axis names, tuples of them, or None).")
    return tuple(out)


def _checked(mesh: Mesh, spec: tuple) -> tuple:
    used = [i for d in spec if d is not None for i in (d if isinstance(d, tuple) else (d,))]
    bad = [i for i in used if not 0 <= i < len(mesh.mesh_shape)]
    if bad:
        raise ValueError(f"partition_spec ({spec}) contains out of bound index into mesh_shape "
                         f"{mesh.mesh_shape}: {bad}.")
    if len(set(used)) != len(used):
        raise ValueError(f"Each device mesh dimension should appear at most once in "
                         f"partition_spec {spec}.")
    return spec


def _tile_assignment(mesh: Mesh, spec: tuple) -> np.ndarray:
    tiled = [d for d in spec if d is not None]
    order = [i for d in tiled for i in (d if isinstance(d, tuple) else (d,))]
    rest = [i for i in range(len(mesh.mesh_shape)) if i not in order]
    tiles = mesh.get_logical_mesh().transpose(order + rest)
    for i, d in enumerate(tiled):  # merge each tuple's axes, now adjacent, into one
        if isinstance(d, tuple):
            shape = tiles.shape
            tiles = tiles.reshape(shape[:i] + (-1,) + shape[i + len(d):])
    return tiles


_global_mesh: Mesh | None = None


def set_global_mesh(mesh: Mesh) -> None:
    """The mesh `mark_sharding` & co use when given none."""
    global _global_mesh
    _global_mesh = mesh


def get_global_mesh() -> Mesh | None:
    return _global_mesh


def job_mesh(mesh: Mesh | None, what: str) -> Mesh:
    """`mesh` (the global mesh when None), checked to span every device of the job."""
    mesh = get_global_mesh() if mesh is None else mesh
    if mesh is None:
        raise ValueError(f"{what}: no mesh given and no global mesh set "
                         "(xs.set_global_mesh(mesh)).")
    devices = len(client().global_devices)
    if mesh.size() != devices:
        raise ValueError(f"{what}: mesh {mesh.mesh_shape} spans {mesh.size()} devices, but "
                         f"the job has {devices} (xr.global_runtime_device_count()).")
    return mesh


def spec_sharding(mesh: Mesh, partition_spec: PartitionSpec, shape: Sequence[int], what: str
                ) -> Any:
    """The sharding `partition_spec` names on `mesh` for a tensor of `shape`, checked to
    give one entry per dim."""
    partition_spec = tuple(partition_spec)
    if len(shape) != len(partition_spec):
        raise ValueError(f"{what}: partition spec {partition_spec} has {len(partition_spec)} "
                         f"entries, but the tensor has {len(shape)} dims (shape "
                         f"{tuple(shape)}): give one entry per dim.")
    return mesh.get_op_sharding(partition_spec)


class HybridMesh(Mesh):
    """A mesh laid out for the network: `ici_mesh_shape` over the fast links inside a slice,
    `dcn_mesh_shape` over the data-center network between slices (both ordered by
    increasing network intensity). The layout is jax's (`jax.experimental.mesh_utils`),
    which follows the physical topology where the devices report one (TPU coordinates)
    and is plain ordinal order elsewhere."""

    ici_mesh_shape: tuple[int, ...]
    dcn_mesh_shape: tuple[int, ...]

    def __init__(self, *, ici_mesh_shape: Sequence[int],
                 dcn_mesh_shape: Sequence[int] | None = None,
                 axis_names: Sequence[str] | None = None,
                 devices: Sequence[Any] | None = None) -> None:
        ici = tuple(int(s) for s in ici_mesh_shape)
        dcn = tuple(int(s) for s in dcn_mesh_shape) if dcn_mesh_shape else (1,) * len(ici)
        if len(ici) != len(dcn):
            raise ValueError(f"HybridMesh: ici_mesh_shape {ici} and dcn_mesh_shape {dcn} must "
                             "have the same number of axes.")
        devices = list(devices if devices is not None else _runtime_devices())
        slices = {getattr(d, "slice_index", 0) for d in devices}
        if math.prod(dcn) > 1:
            if len(slices) == 1:
                raise ValueError("Invalid dcn_mesh_shape for single slice mesh: the devices "
                                 f"form one slice, but dcn_mesh_shape is {dcn}.")
            grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices)
        else:
            if len(slices) > 1:
                raise ValueError("Provide dcn_mesh_shape to create a mesh for multislice "
                                 f"({len(slices)} slices found).")
            grid = mesh_utils.create_device_mesh(ici, devices)
        ordinal = {id(d): getattr(d, "ordinal", i) for i, d in enumerate(devices)}
        self.ici_mesh_shape, self.dcn_mesh_shape = ici, dcn
        super().__init__([ordinal[id(d)] for d in grid.reshape(-1)],
                         tuple(i * d for i, d in zip(ici, dcn, strict=True)), axis_names)


@dataclasses.dataclass(frozen=True, eq=False)
class _RuntimeDevice:
    """One device as `xr.global_runtime_device_attributes()` describes it, in the form
    jax's mesh_utils reads (`platform`, `device_kind`, `coords`, `core_on_chip`,
    `slice_index`); `ordinal` is the runtime ordinal its name carries (`TPU:3` -> 3)."""

    ordinal: int
    platform: str
    device_kind: str
    coords: tuple | None
    core_on_chip: int
    slice_index: int


def _runtime_devices() -> list[_RuntimeDevice]:
    """The job's devices from the runtime's attributes: the physical topology where the
    plugin reports coordinates (TPU), the ordinal order elsewhere."""
    out = []
    for i, attributes in enumerate(xr.global_runtime_device_attributes()):
        name = str(attributes.get("name", f"{xr.device_type()}:{i}"))
        kind, _, index = name.rpartition(":")
        coords = attributes.get("coords")
        out.append(_RuntimeDevice(
            ordinal=int(index) if index.isdigit() else i,
            platform=kind.lower(),
            device_kind=str(attributes.get("device_kind", kind)),
            coords=None if coords is None else tuple(coords),
            core_on_chip=int(attributes.get("core_on_chip", 0)),
            slice_index=int(attributes.get("slice_index", 0))))
    return out


def get_1d_mesh(axis_name: str | None = None) -> Mesh:
    """Every device of the job along one axis."""
    count = len(client().global_devices)
    return Mesh(np.arange(count), (count,), None if axis_name is None else (axis_name,))
