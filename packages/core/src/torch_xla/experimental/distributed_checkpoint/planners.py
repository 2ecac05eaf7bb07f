"""`torch.distributed.checkpoint` planners for state dicts holding sharded XLA tensors.

`SPMDSavePlanner` writes, per process, only the tiles its devices own (each distinct
tile once, replicas skipped), each as a chunk of the global tensor; `SPMDLoadPlanner`
reads, per process, only the chunks its devices need and lays them out as the target
tensor is sharded, whatever mesh wrote the checkpoint. Everything else in the state
dict (CPU tensors, unsharded XLA tensors, Python objects) goes through torch's default
planners; XLA tensors travel through the host.

>>> dcp.save(model.state_dict(), storage_writer=dcp.FileSystemWriter(path),
...          planner=SPMDSavePlanner())
>>> dcp.load(state, storage_reader=dcp.FileSystemReader(path), planner=SPMDLoadPlanner())
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.default_planner import (
    DefaultLoadPlanner,
    DefaultSavePlanner,
    create_default_local_load_plan,
)
from torch.distributed.checkpoint.metadata import (
    STATE_DICT_TYPE,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import (
    LoadPlan,
    ReadItem,
    SavePlan,
    TensorWriteData,
    WriteItem,
    WriteItemType,
)
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

import torch_xla.runtime as xr
from torch_xla.distributed.spmd.xla_sharded_tensor import XLAShardedTensor
from torch_xla.experimental.distributed_checkpoint._tiles import (
    HostTiles,
    Tile,
    is_xla,
    layouts,
    local_tiles,
    read_owned,
    rebuild,
)
from torch_xla.lazy import functional, sharding


def require_process_group(what: str) -> None:
    """Refuse a checkpoint of a job of several processes made without a torch.distributed
    process group: dcp would take each process for the only one, and they would write
    the same files over each other (or load a checkpoint half-written)."""
    count = xr.process_count()
    if count > 1 and not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            f"{what}: this job runs {count} processes, but torch.distributed has no process "
            "group, so each process would save or load as if it were alone (writing the "
            "same files over the others'). On every process, before checkpointing, run "
            "`import torch_xla.distributed.xla_backend` and "
            "`torch.distributed.init_process_group('gloo', init_method='xla://')`.")


def _unwrap(value: Any) -> Any:
    return value.global_tensor if isinstance(value, XLAShardedTensor) else value


class SPMDSavePlanner(DefaultSavePlanner):
    """Saves a state dict whose XLA tensors may be sharded (`xs.mark_sharding`): each
    process writes the tiles its devices own, as chunks of the global tensor. A state
    dict staged on the host (`CheckpointManager.save_async`) is written alike."""

    def __init__(self) -> None:
        super().__init__(flatten_state_dict=True, flatten_sharded_tensors=False)
        self.sharded_state_dict: dict[str, torch.Tensor] = {}
        self.unsharded_state_dict: dict[str, Any] = {}
        self._tiles: dict[str, list[Tile]] = {}
        # Host copies of a tensor's owned tiles, made on its first write item and
        # dropped one by one as they are written.
        self._host: dict[str, dict[tuple[int, ...], torch.Tensor]] = {}

    def set_up_planner(self, state_dict: STATE_DICT_TYPE, storage_meta: StorageMeta | None = None,
                       is_coordinator: bool = False) -> None:
        require_process_group("SPMDSavePlanner")
        super().set_up_planner(state_dict, storage_meta, is_coordinator)
        flat = self.state_dict
        self._host = {}
        found = layouts(flat)
        self._tiles = {k: local_tiles(layout, tuple(flat[k].shape))
                       for k, layout in found.items()}
        for key, value in flat.items():  # staged by `to_host`: tiles already copied
            if isinstance(value, HostTiles):
                self._tiles[key] = [Tile(-1, o, tuple(t.shape), True)
                                    for o, t in value.tiles.items()]
                self._host[key] = dict(value.tiles)
        self.sharded_state_dict = {k: flat[k] for k in self._tiles}
        self.unsharded_state_dict = {k: _unwrap(v) for k, v in flat.items()
                                     if k not in self._tiles}
        self.state_dict = self.unsharded_state_dict  # the default planner's part

    def create_local_plan(self) -> SavePlan:
        plan = super().create_local_plan()
        items = [_write_item(fqn, value.shape, value.dtype, tile, position)
                 for fqn, value in self.sharded_state_dict.items()
                 for position, tile in enumerate(self._tiles[fqn]) if tile.owner]
        self.plan = dataclasses.replace(plan, items=plan.items + items)
        return self.plan

    def lookup_object(self, index: MetadataIndex) -> Any:
        if index.fqn not in self.sharded_state_dict:
            found = super().lookup_object(index)
            return found.cpu() if is_xla(found) else found
        value = self.sharded_state_dict[index.fqn]
        tiles = self._host.get(index.fqn)
        if tiles is None and not isinstance(value, HostTiles):
            tiles = self._host[index.fqn] = read_owned(value, self._tiles[index.fqn])
        tile = None if tiles is None else tiles.pop(tuple(index.offset), None)
        if tile is None:
            raise RuntimeError(f"SPMDSavePlanner: no tile of {index.fqn!r} at offsets "
                               f"{tuple(index.offset)} is owned by this process, or it was "
                               "written already; save with a fresh planner per dcp.save call.")
        if not tiles:
            del self._host[index.fqn]
        return tile


def _write_item(fqn: str, shape: tuple[int, ...], dtype: torch.dtype, tile: Tile,
                position: int) -> WriteItem:
    """`position`: the tile's among this process's (the index of its shard in
    `XLAShardedTensor.local_shards`; of a staged tensor, among its staged tiles)."""
    offsets = torch.Size(tile.offsets)
    return WriteItem(
        index=MetadataIndex(fqn, offsets, position),
        type=WriteItemType.SHARD,
        tensor_data=TensorWriteData(
            chunk=ChunkStorageMetadata(offsets=offsets, sizes=torch.Size(tile.sizes)),
            properties=TensorProperties(dtype=dtype),
            size=torch.Size(shape),
        ),
    )


class SPMDLoadPlanner(DefaultLoadPlanner):
    """Loads a checkpoint into a state dict whose XLA tensors may be sharded, in place:
    each process reads the chunks its devices need and the tensor keeps its sharding
    (which may differ from the one that saved it). `allow_partial_load`: keys of the
    state dict missing from the checkpoint are left alone instead of failing."""

    def __init__(self, allow_partial_load: bool = False) -> None:
        super().__init__(flatten_state_dict=True, flatten_sharded_tensors=False,
                         allow_partial_load=allow_partial_load)
        self.sharded_state_dict: dict[str, torch.Tensor] = {}
        self.unsharded_state_dict: dict[str, Any] = {}
        self._layouts: dict[str, Any] = {}
        self._tiles: dict[str, list[Tile]] = {}
        self._xla_targets: dict[str, torch.Tensor] = {}  # unsharded XLA tensors, by key
        # Host buffers that chunks are read into: per sharded key one per distinct tile
        # (by offsets), per unsharded XLA tensor one whole tensor.
        self._buffers: dict[str, dict[tuple[int, ...], torch.Tensor]] = {}
        self._pending: dict[str, int] = {}  # elements still to be read, per key

    def set_up_planner(self, state_dict: STATE_DICT_TYPE, metadata: Metadata | None = None,
                       is_coordinator: bool = False) -> None:
        require_process_group("SPMDLoadPlanner")
        super().set_up_planner(state_dict, metadata, is_coordinator)
        flat = _checked(self.state_dict, metadata, self.allow_partial_load)
        self._layouts = layouts(flat)
        self.sharded_state_dict = {k: flat[k] for k in self._layouts}
        self._xla_targets = {k: _unwrap(v) for k, v in flat.items()
                             if k not in self._layouts and is_xla(v)}
        self.unsharded_state_dict = {
            k: torch.empty(v.shape, dtype=v.dtype) if k in self._xla_targets else v
            for k, v in flat.items() if k not in self._layouts}
        self.state_dict = self.unsharded_state_dict  # the default planner's part

    def create_local_plan(self) -> LoadPlan:
        # Not the default planner's: seeing checkpoint keys absent from its part of the
        # state dict, it would fall back to reading the whole state dict.
        plan = create_default_local_load_plan(self.unsharded_state_dict, self.metadata,
                                              not self.allow_partial_load)
        items: list[ReadItem] = []
        for fqn, tensor in self.sharded_state_dict.items():
            tiles = local_tiles(self._layouts[fqn], tuple(tensor.shape))
            self._tiles[fqn] = tiles
            distinct = {tile.offsets: tile.sizes for tile in tiles}
            self._buffers[fqn] = {offsets: torch.empty(sizes, dtype=tensor.dtype)
                                  for offsets, sizes in distinct.items()}
            self._pending[fqn] = sum(math.prod(sizes) for sizes in distinct.values())
            chunks = [ChunkStorageMetadata(torch.Size(o), torch.Size(s))
                      for o, s in distinct.items()]
            items += create_read_items_for_chunk_list(fqn, self.metadata.state_dict_metadata[fqn],
                                                      chunks)
        for fqn, target in self._xla_targets.items():
            self._pending[fqn] = target.numel()
        self.plan = dataclasses.replace(plan, items=plan.items + items)
        return self.plan

    def lookup_tensor(self, index: MetadataIndex) -> torch.Tensor:
        if index.fqn in self.sharded_state_dict:  # read items' offsets are the tile's
            return self._buffers[index.fqn][tuple(index.offset)]
        return super().lookup_tensor(index)

    def commit_tensor(self, read_item: ReadItem, tensor: torch.Tensor) -> None:
        fqn = read_item.dest_index.fqn
        if fqn not in self._pending:
            return
        self._pending[fqn] -= math.prod(read_item.lengths)
        if self._pending[fqn] > 0:
            return
        del self._pending[fqn]
        if fqn in self._xla_targets:
            target = self._xla_targets[fqn]
            layout = sharding.layout(functional.unwrap(target))  # replicated, if marked so
            with torch.no_grad():
                target.copy_(self.unsharded_state_dict[fqn])
            if layout is not None:
                sharding.relayout(target, lambda inner: sharding.annotate(inner, layout))
            return
        buffers = self._buffers.pop(fqn)
        tiles = [buffers[tile.offsets] for tile in self._tiles[fqn]]
        rebuild(self.sharded_state_dict[fqn], self._layouts[fqn], tiles)


def _checked(flat: dict[str, Any], metadata: Metadata | None, partial: bool) -> dict[str, Any]:
    """`flat` less the keys the checkpoint lacks (with `partial`), after checking each
    tensor's shape against the saved one; errors name the key and both values."""
    saved = {} if metadata is None else metadata.state_dict_metadata
    kept = {}
    for key, value in flat.items():
        md = saved.get(key)
        if md is None:
            if partial:
                continue
            known = ", ".join(sorted(saved)[:8]) + (", ..." if len(saved) > 8 else "")
            raise RuntimeError(
                f"SPMDLoadPlanner: key {key!r} of the state dict is missing from the "
                f"checkpoint, which holds {len(saved)} keys ({known}). Load a state dict "
                "with the saved keys, or pass SPMDLoadPlanner(allow_partial_load=True) to "
                "leave missing keys as they are.")
        if isinstance(value, torch.Tensor):
            if not isinstance(md, TensorStorageMetadata):
                raise TypeError(f"SPMDLoadPlanner: {key!r} is a tensor in the state dict, but "
                                "the checkpoint saved a Python object under that key.")
            if tuple(md.size) != tuple(value.shape):
                raise ValueError(
                    f"SPMDLoadPlanner: shape mismatch for {key!r}: the checkpoint holds "
                    f"{tuple(md.size)}, the state dict's tensor is {tuple(value.shape)}. Load "
                    "into a tensor of the saved shape (resharding is fine, reshaping is not).")
        kept[key] = value
    return kept
