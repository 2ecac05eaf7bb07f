"""Sharding strings parsed and drawn (`torch_xla.distributed.spmd.debugging`), checked
against the strings XLA itself prints for shardings built from our meshes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_python

from torch_xla.distributed.spmd.debugging import format_sharding, parse_sharding
from torch_xla.distributed.spmd.mesh import Mesh


def _tiles(sharding: str, n: int | None = None) -> list:
    return [list(t) for t in parse_sharding(sharding, n).tiles.reshape(-1)]


def test_tiled_replicated_and_maximal():
    assert _tiles("{devices=[2,2]0,1,2,3}") == [[0], [1], [2], [3]]
    assert parse_sharding("{devices=[2,2]0,1,2,3}").tiles.shape == (2, 2)
    assert _tiles("{replicated}", 3) == [[0, 1, 2]]
    assert _tiles("{maximal device=5}") == [[5]]


def test_partial_replication_groups_the_last_tile_dim():
    parsed = parse_sharding("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}")
    assert parsed.tiles.shape == (2, 1)
    assert [list(t) for t in parsed.tiles.reshape(-1)] == [[0, 1], [2, 3]]


def test_device_ids_above_nine():
    """PyTorch/XLA's parser reads ids digit by digit; ids 10+ must stay whole."""
    ids = ",".join(str(i) for i in [11, 3, 10, 2])
    assert _tiles(f"{{devices=[4]{ids}}}") == [[11], [3], [10], [2]]


@pytest.mark.parametrize("bad, message", [
    ("devices=[2]0,1", "Not an XLA sharding string"),
    ("{devices=[2,2]0,1,2}", "lists 3 devices for tile shape"),
    ("{replicated}", "needs num_devices"),
])
def test_bad_strings(bad, message):
    with pytest.raises(ValueError, match=message):
        parse_sharding(bad)


XLA_STRINGS = """
import json
import numpy as np
import torch_xla
from torch_xla.distributed import spmd as xs
from torch_xla.distributed.spmd.debugging import (format_sharding, parse_sharding,
                                                  visualize_sharding)
from torch_xla.pjrt.client import client

torch_xla.device()
devices = client().global_devices
mesh = xs.Mesh(np.array([3, 1, 0, 2, 7, 5, 4, 6]), (4, 2), ("data", "model"))
out = []
for spec in [("data", "model"), ("model", "data"), ("data", None), (None, "model"),
             (("data", "model"), None)]:
    xla_text = str(mesh.sharding(spec, devices)._to_xla_hlo_sharding(2))
    ours = format_sharding(mesh, spec)
    # XLA numbers devices by position in the mesh; ours by global ordinal
    by_xla = [sorted(int(mesh.device_ids[i]) for i in t)
              for t in parse_sharding(xla_text, 8).tiles.reshape(-1)]
    by_ours = [sorted(t) for t in parse_sharding(ours, 8).tiles.reshape(-1)]
    out.append([xla_text + " vs " + ours, by_xla == by_ours])
table = visualize_sharding("{devices=[2,4]0,1,2,3,4,5,6,7}", use_color=False)
out.append([table.row_count, len(table.columns)])
print(json.dumps(out))
"""


def test_our_sharding_text_names_the_devices_xla_places_tiles_on():
    done = run_python(XLA_STRINGS, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "8"})
    assert done.returncode == 0, done.stderr
    *specs, (rows, cols) = json.loads(done.stdout.strip().splitlines()[-1])
    for text, same in specs:
        assert same, text
    assert (rows, cols) == (2, 4)
    assert "CPU 5" in done.stdout  # the drawn grid names each tile's device


DRAWN = """
import io, json
import rich.console
import torch, torch_xla
from torch_xla.distributed.spmd.debugging import visualize_sharding, visualize_tensor_sharding

def text(table):
    console = rich.console.Console(file=io.StringIO(), width=80)
    console.print(table)
    return console.file.getvalue()

out = {s: text(visualize_sharding(s, use_color=False))
       for s in ["{devices=[2,2]0,1,2,3}", "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
                 "{replicated}", "{maximal device=2}", ""]}
out["unsharded"] = text(visualize_tensor_sharding(torch.ones(4, 4, device=torch_xla.device()),
                                                  use_color=False))
print(json.dumps(out))
"""

# PyTorch/XLA's cells: one line of padding all round the device text, "CPU 0" for a tile
# on one device, "CPU [0, 1]" for several and for a replicated tensor.
TILED = """\
┌───────┬───────┐
│       │       │
│ CPU 0 │ CPU 1 │
│       │       │
├───────┼───────┤
│       │       │
│ CPU 2 │ CPU 3 │
│       │       │
└───────┴───────┘
"""
PARTIAL = """\
┌────────────┐
│            │
│ CPU [0, 1] │
│            │
├────────────┤
│            │
│ CPU [2, 3] │
│            │
└────────────┘
"""
REPLICATED = """\
┌──────────────────┐
│                  │
│ CPU [0, 1, 2, 3] │
│                  │
└──────────────────┘
"""


def test_drawn_cells_name_devices_as_pytorch_xla_does():
    done = run_python(DRAWN, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"})
    assert done.returncode == 0, done.stderr
    drawn = json.loads(done.stdout.strip().splitlines()[-1])
    assert drawn["{devices=[2,2]0,1,2,3}"] == TILED
    assert drawn["{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"] == PARTIAL
    assert drawn["{replicated}"] == REPLICATED
    assert drawn[""] == REPLICATED and drawn["unsharded"] == REPLICATED  # nobody laid it out
    assert "│ CPU 2 │" in drawn["{maximal device=2}"]


def test_np_grid_is_object_array_of_tuples():
    parsed = parse_sharding("{devices=[1,2]1,0}")
    assert parsed.tiles.dtype == np.dtype(object) and parsed.tiles[0, 1] == (0,)


def test_format_sharding_is_pytorch_xla_text():
    mesh = Mesh(np.arange(8), (4, 2))
    assert format_sharding(mesh, (0, 1)) == "{devices=[4,2]0,1,2,3,4,5,6,7}"
    assert format_sharding(mesh, (1, 0)) == "{devices=[2,4]0,2,4,6,1,3,5,7}"
    assert format_sharding(mesh, (0, None)) == (
        "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}")
    assert format_sharding(mesh, (None, None)) == "{replicated}"
    assert format_sharding(Mesh([0], (1,)), (0,)) == "{maximal device=0}"


def test_iota_form():
    assert _tiles("{devices=[2,2]<=[4]}") == [[0], [1], [2], [3]]
    assert _tiles("{devices=[2,2]<=[2,2]T(1,0)}") == [[0], [2], [1], [3]]
