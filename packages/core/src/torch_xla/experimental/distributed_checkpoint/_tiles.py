"""Which tiles of a sharded XLA tensor this process holds, writes and reads.

A checkpoint stores each distinct tile once. The tile's *owner* is the device with the
lowest global ordinal among those holding it (replicas hold the same tile): every
process works that out alone from the sharding, so no process needs to ask another,
and together they write every tile exactly once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from torch_xla.distributed.spmd.xla_sharded_tensor import XLAShardedTensor
from torch_xla.lazy import functional, graph, sharding, transfer
from torch_xla.lazy.tensor import device_index
from torch_xla.pjrt.client import client


@dataclasses.dataclass(frozen=True)
class Tile:
    """One device's block of a global tensor."""

    ordinal: int  # the global runtime ordinal of the device holding it
    offsets: tuple[int, ...]  # where the block starts in the global tensor
    sizes: tuple[int, ...]  # the block's shape
    owner: bool  # this device writes the block (the lowest ordinal holding it)


def _unwrap(t: Any) -> Any:
    return t.global_tensor if isinstance(t, XLAShardedTensor) else t


def _engine(t: torch.Tensor) -> Any:
    return functional.unwrap(_unwrap(t))


def is_xla(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "xla"


def layouts(tensors: dict[Any, Any]) -> dict[Any, Any]:
    """The jax sharding of each XLA tensor of `tensors` whose data is split over devices
    (replicated and unannotated tensors are left out). Pending values are computed first,
    in one program, so every layout is the one the data really has."""
    engine = {k: _engine(t) for k, t in tensors.items() if is_xla(t)}
    if not engine:
        return {}
    graph.materialize(list(engine.values()))
    found = {}
    for key, inner in engine.items():
        layout = sharding.layout(inner)
        if layout is not None and not sharding.sharding_is_replicated(layout, inner.dim()):
            found[key] = layout
    return found


def _bounds(index: tuple, shape: tuple) -> tuple[tuple[int, ...], tuple[int, ...]]:
    ranges = [range(*s.indices(n)) for s, n in zip(index, shape, strict=True)]
    return tuple(r.start for r in ranges), tuple(len(r) for r in ranges)


def local_tiles(layout: Any, shape: tuple[int, ...]) -> list[Tile]:
    """The tiles of a `shape` tensor laid out as `layout` on this process's devices, by
    ordinal."""
    devices = client().global_devices
    ordinal = {id(d): i for i, d in enumerate(devices)}
    owners: dict[tuple, int] = {}
    for device, index in layout.devices_indices_map(shape).items():
        bounds = _bounds(index, shape)
        owners[bounds] = min(owners.get(bounds, len(devices)), ordinal[id(device)])
    tiles = []
    for device, index in layout.addressable_devices_indices_map(shape).items():
        bounds = _bounds(index, shape)
        tiles.append(Tile(ordinal[id(device)], *bounds, owners[bounds] == ordinal[id(device)]))
    return sorted(tiles, key=lambda tile: tile.ordinal)


def read_owned(t: torch.Tensor, tiles: list[Tile]) -> dict[tuple[int, ...], torch.Tensor]:
    """Host copies of the tiles of `t` this process owns (of `tiles`), by offsets; only
    those are copied off the devices."""
    runtime = client()
    owners = {tile.ordinal: tile.offsets for tile in tiles if tile.owner}
    owned = {}
    for shard in _engine(t)._node.array.addressable_shards:
        offsets = owners.get(runtime.global_devices.index(shard.device))
        if offsets is not None:
            owned[offsets] = transfer.from_numpy(runtime.to_host(shard.data), t.dtype)
    return owned


def rebuild(t: torch.Tensor, layout: Any, tiles: list[torch.Tensor]) -> None:
    """Replace `t`'s value by the host `tiles` (one per device of this process, by
    ordinal), laid out as `layout`; the tensor object (a parameter, say) stays the same."""
    target = _unwrap(t)
    shape = tuple(target.shape)
    host = [transfer.to_numpy(tile.contiguous()) for tile in tiles]
    data = sharding.from_shards(host, target.dtype, layout, shape, device_index(target.device))
    sharding.relayout(target, lambda inner: inner._set(data))


@dataclasses.dataclass
class HostTiles:
    """The tiles of a sharded tensor this process owns, copied to the host (a value of a
    state dict staged for a background save); `SPMDSavePlanner` writes them as it would
    the tensor's."""

    tiles: dict[tuple[int, ...], torch.Tensor]  # by offsets into the global tensor
    shape: tuple[int, ...]  # the global tensor's
    dtype: torch.dtype


def to_host(state_dict: Any) -> Any:
    """`state_dict` with its XLA tensors copied to the host, so the devices may go on
    while it is written: a sharded tensor becomes the `HostTiles` this process owns, any
    other XLA tensor a CPU tensor; everything else is kept as it is."""
    leaves, spec = tree_flatten(state_dict)
    found = layouts(dict(enumerate(leaves)))
    staged = []
    for i, leaf in enumerate(leaves):
        if i in found:
            owned = local_tiles(found[i], tuple(leaf.shape))
            staged.append(HostTiles(read_owned(leaf, owned), tuple(leaf.shape), leaf.dtype))
        elif is_xla(leaf):
            staged.append(_unwrap(leaf).cpu())
        else:
            staged.append(leaf)
    return tree_unflatten(staged, spec)
