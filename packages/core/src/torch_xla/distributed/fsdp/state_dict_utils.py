"""Rebuild a whole model's state dict from FSDP's sharded checkpoints.

Each rank saves `{"model": fsdp.state_dict(), "shard_metadata": fsdp.get_shard_metadata()}`
(with `xm.save(..., master_only=False)`, one file per rank); these functions put the
shards back together under the original module's names, as PyTorch/XLA's functions of
the same names do (they also read its checkpoints).
"""

from __future__ import annotations

import glob
import math
import os
from collections import OrderedDict
from typing import Any

import torch

from torch_xla._atomic import atomic_open

_WRAPPERS = ("_fsdp_wrapped_module.", "_fpw_module.")  # PyTorch/XLA's flatten wrapper too


def _unwrapped(name: str) -> str:
    for wrapper in _WRAPPERS:
        name = name.replace(wrapper, "")
    return name


def _whole(parts: list[torch.Tensor], orig_size: torch.Size) -> torch.Tensor:
    """The parameter from its shards in rank order: flat shards hold its elements
    padded at the end, dim-0 shards its rows padded at the bottom."""
    joined = torch.cat(parts, dim=0)
    if joined.dim() > 1:
        return joined[:orig_size[0]].clone()
    return joined[:math.prod(orig_size)].reshape(orig_size).clone()


def consolidate_sharded_state_dicts(state_dict_list: list[dict[str, Any]],
                                    shard_metadata: dict[str, Any]) -> OrderedDict:
    """The whole model's state dict from every rank's sharded `state_dict()`, in rank
    order, and the `get_shard_metadata()` of any rank."""
    world = shard_metadata["world_size"]
    if len(state_dict_list) != world:
        raise ValueError(f"consolidate_sharded_state_dicts: the metadata is of {world} "
                         f"ranks but {len(state_dict_list)} state dicts were given; pass "
                         "every rank's, in rank order.")
    buffer_info = shard_metadata.get("buffer_info", {})
    shard_info = shard_metadata["shard_info"]
    merged: OrderedDict = OrderedDict()
    for key, value in state_dict_list[0].items():
        parts = key.split(".")
        at = next((i for i, part in enumerate(parts) if part.startswith("_fsdp_shard")), None)
        if at is None:
            if key in buffer_info:
                value = value.to(buffer_info[key]["_orig_dtype"])
            merged[key] = value
            continue
        prefix, name = ".".join(parts[:at]), parts[at]
        info = shard_info.get(prefix, {}).get(name)
        if info is None:
            raise KeyError(f"consolidate_sharded_state_dicts: no shard metadata for {key!r}; "
                           "is the metadata from the same model?")
        whole = _whole([sd[key] for sd in state_dict_list], info["_orig_size"])
        merged[f"{prefix}.{info['_orig_name']}" if prefix else info["_orig_name"]] = whole
    for key, (names, shapes, numels) in shard_metadata.get("flatten_info", {}).items():
        flat = merged.pop(key)
        parent = key.rsplit(".", 1)[0]
        for name, shape, piece in zip(names, shapes, flat.split(list(numels)), strict=True):
            merged[f"{parent}.{name}"] = piece.view(shape).clone()
    for alias, primary in shard_metadata.get("alias_info", {}).items():
        merged[alias] = merged[primary]
    return OrderedDict((_unwrapped(k), v) for k, v in merged.items())


def consolidate_sharded_model_checkpoints(ckpt_prefix: str, ckpt_suffix: str = "*.pth",
                                          save_path: str = "", save_model: bool = True
                                          ) -> tuple[OrderedDict, str | None]:
    """Read every rank's checkpoint (`ckpt_prefix + ckpt_suffix`, a glob), each a dict
    with "model" and "shard_metadata", and consolidate them. With `save_model`, write
    `{"model": full_state_dict}` to `save_path` (default `ckpt_prefix +
    "_consolidated.pth"`), atomically. Returns (the state dict, where it was saved)."""
    pattern = ckpt_prefix + ckpt_suffix
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise FileNotFoundError(f"Cannot find any files matching {pattern}.")
    checkpoints = [torch.load(p, map_location="cpu", weights_only=False) for p in paths]
    for path, ckpt in zip(paths, checkpoints, strict=True):
        if not isinstance(ckpt, dict) or "model" not in ckpt or "shard_metadata" not in ckpt:
            raise ValueError(f"{path} is not an FSDP shard checkpoint: expected a dict with "
                             "'model' (the rank's state_dict()) and 'shard_metadata' "
                             "(get_shard_metadata()).")
    ranked = sorted(zip(paths, checkpoints, strict=True),
                    key=lambda pair: pair[1]["shard_metadata"]["rank"])
    world = ranked[0][1]["shard_metadata"]["world_size"]
    if len(ranked) != world:
        raise ValueError(f"Expecting {world} files (based on metadata in {ranked[0][0]}) but "
                         f"got {len(ranked)} files. Please check if you have missing or "
                         f"unexpected files in {pattern}.")
    for index, (path, ckpt) in enumerate(ranked):
        if ckpt["shard_metadata"]["rank"] != index:
            raise ValueError(f"Expecting rank {index} for {path} but it is ranked "
                             f"{ckpt['shard_metadata']['rank']} (out of {world} files). "
                             f"Please check if you have missing or unexpected files in "
                             f"{pattern}.")
    full = consolidate_sharded_state_dicts([c["model"] for _, c in ranked],
                                           ranked[0][1]["shard_metadata"])
    if not save_model:
        return full, None
    target = save_path or ckpt_prefix + "_consolidated.pth"
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    with atomic_open(target) as f:
        torch.save({"model": full}, f)
    return full, target
