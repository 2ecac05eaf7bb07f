"""Seeing what was sharded: XLA sharding strings parsed and drawn as a device grid.

`visualize_sharding('{devices=[2,2]0,1,2,3}')` draws which device holds each tile
of a 2-d tensor (with `rich`, as PyTorch/XLA does); `parse_sharding` is the same
information as data. Strings are XLA's HloSharding text, as
`torch_xla._XLAC._get_xla_sharding_spec` returns and jax prints.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from typing import Any

import numpy as np

from torch_xla.distributed.spmd.mesh import Mesh
from torch_xla.lazy import functional, sharding
from torch_xla.pjrt import spmd
from torch_xla.pjrt.client import client

# Whether `rich`, which `visualize_sharding` draws with, can be imported.
RICH_ENABLED = importlib.util.find_spec("rich") is not None

# `{devices=[2,2]0,1,2,3}`, or XLA's iota form `{devices=[4,2]<=[2,4]T(1,0)}`.
_TILED = re.compile(
    r"^\{devices=\[([\d,]+)\](?:([\d,]+)|<=\[([\d,]+)\](?:T\(([\d,]+)\))?)((?:\s+\w+)*)\}$"
)


@dataclasses.dataclass(frozen=True)
class ParsedSharding:
    """Which devices hold each tile: `tiles[i, j, ...]` lists the devices (replicas)."""

    tiles: np.ndarray  # object array of tuples of device ids, one entry per tile
    replicated: bool  # the whole tensor on every device


def parse_sharding(sharding: str, num_devices: int | None = None) -> ParsedSharding:
    """XLA's sharding text (`{replicated}`, `{maximal device=N}`, `{devices=[..]ids}` with
    optional `last_tile_dim_replicate`) as a grid of device-id tuples."""
    text = sharding.strip()
    if text == "{replicated}":
        if num_devices is None:
            raise ValueError("A replicated sharding needs num_devices to list its devices.")
        grid = np.empty((1,), dtype=object)
        grid[0] = tuple(range(num_devices))
        return ParsedSharding(grid, replicated=True)
    maximal = re.fullmatch(r"\{maximal device=(\d+)\}", text)
    if maximal:
        grid = np.empty((1,), dtype=object)
        grid[0] = (int(maximal.group(1)),)
        return ParsedSharding(grid, replicated=False)
    tiled = _TILED.match(text)
    if not tiled:
        raise ValueError(f"Not an XLA sharding string: {sharding!r} (expected '{{replicated}}', "
                         "'{maximal device=N}' or '{devices=[d0,d1,...]id,id,...}').")
    dims = [int(d) for d in tiled.group(1).split(",")]
    if tiled.group(2):
        ids = [int(i) for i in tiled.group(2).split(",")]
    else:  # iota: 0..n-1 reshaped, optionally transposed
        shape = [int(d) for d in tiled.group(3).split(",")]
        perm = [int(a) for a in tiled.group(4).split(",")] if tiled.group(4) else None
        ids = spmd.iota_devices(shape, perm)
    flags = tiled.group(5).split()
    if len(ids) != int(np.prod(dims)):
        raise ValueError(f"Sharding {sharding!r} lists {len(ids)} devices for tile shape "
                         f"{dims} ({int(np.prod(dims))} expected).")
    devices = np.array(ids).reshape(dims)
    replica_dims = 1 if "last_tile_dim_replicate" in flags else 0
    tile_shape = dims[:len(dims) - replica_dims] if replica_dims else dims
    grid = np.empty(tile_shape, dtype=object)
    for index in np.ndindex(*tile_shape):
        grid[index] = tuple(np.asarray(devices[index]).reshape(-1).tolist())
    return ParsedSharding(grid, replicated=False)


def format_sharding(mesh: Mesh, partition_spec: tuple) -> str:
    """PyTorch/XLA's sharding text for `partition_spec` on `mesh`, with global device ids
    (what `_XLAC._get_xla_sharding_spec` returns)."""
    spec = mesh.translate(partition_spec)
    if mesh.size() == 1:
        return f"{{maximal device={int(mesh.device_ids[0])}}}"
    if all(d is None for d in spec):
        return "{replicated}"
    tiles = mesh.tile_assignment(spec)
    tiled = sum(d is not None for d in spec)
    replicas = int(np.prod(tiles.shape[tiled:]))
    dims, k = [], 0
    for d in spec:
        dims.append(1 if d is None else tiles.shape[k])
        k += d is not None
    ids = ",".join(str(int(i)) for i in tiles.reshape(-1))
    if replicas > 1:
        return f"{{devices=[{','.join(map(str, dims + [replicas]))}]{ids} last_tile_dim_replicate}}"
    return f"{{devices=[{','.join(map(str, dims))}]{ids}}}"


def visualize_sharding(sharding: str, use_color: bool = True, scale: float = 1.0,
                       min_width: int = 9, max_width: int = 80) -> Any:
    """Draw (and return, as a `rich.table.Table`) which devices hold each tile of a 1-d or
    2-d tensor sharded as `sharding` (`''`: nobody laid it out, drawn replicated), in
    PyTorch/XLA's text: `CPU 0` for a tile on one device, `CPU [0, 1]` for a tile (or a
    replicated tensor) on several. `scale` and `min_width` are PyTorch/XLA's arguments,
    which no longer size the cells."""
    try:
        import rich.align
        import rich.box
        import rich.console
        import rich.padding
        import rich.style
        import rich.table
    except ImportError as error:  # rich is optional, as in PyTorch/XLA
        raise ValueError("`visualize_sharding` requires `rich` to be installed "
                         "(pip install rich).") from error

    parsed = parse_sharding(sharding or "{replicated}", len(client().global_devices))
    grid = parsed.tiles
    if grid.ndim == 1:
        grid = grid.reshape(1, -1)
    if grid.ndim != 2:
        raise ValueError(f"visualize_sharding draws 1-d and 2-d tilings; {sharding!r} tiles "
                         f"{grid.ndim} dims.")
    console = rich.console.Console(width=max_width)
    use_color = use_color and console.color_system is not None
    kind = os.environ.get("PJRT_DEVICE", "") or client().name
    table = rich.table.Table(show_header=False, show_lines=not use_color, padding=0,
                             highlight=not use_color, pad_edge=False,
                             box=rich.box.SQUARE if not use_color else None)
    for row in grid:
        table.add_row(*[
            rich.padding.Padding(
                rich.align.Align(f"{kind} {_devices_text(devices, parsed.replicated)}",
                                 "center", vertical="middle"),
                (1, 1, 1, 1), style=rich.style.Style(bgcolor=None, color=None))
            for devices in row])
    console.print(table, end="\n\n")
    return table


def _devices_text(devices: tuple, replicated: bool) -> str:
    """PyTorch/XLA's name for the devices of one tile: `0`, or `[0, 1]` for several (and
    for a replicated tensor, even on one device)."""
    if len(devices) == 1 and not replicated:
        return str(devices[0])
    return str(list(devices))


def visualize_tensor_sharding(t: Any, **kwargs: Any) -> Any:
    """`visualize_sharding` of an XLA tensor's own sharding (its `_get_xla_sharding_spec`;
    a tensor nobody laid out is drawn replicated, as in PyTorch/XLA); keyword arguments as
    for `visualize_sharding`."""
    return visualize_sharding(sharding.spec(functional.unwrap(getattr(t, "global_tensor", t))),
                              **kwargs)
