"""SPMD meshes and partition specs (`torch_xla.distributed.spmd.mesh`): PyTorch/XLA's
semantics, and the jax sharding built from them places each tile where PyTorch/XLA's
tile assignment says."""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import pytest
from conftest import run_python

from torch_xla.distributed.spmd.mesh import Mesh, ShardingType


def test_mesh_shape_and_logical_mesh():
    mesh = Mesh(np.arange(8), (4, 2), ("x", "y"))
    assert mesh.size() == 8
    assert mesh.shape() == OrderedDict([("x", 4), ("y", 2)])
    assert mesh.get_logical_mesh().tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert mesh.get_axis_name_idx("y") == 1 and mesh.get_axis_name_idx("z") is None
    assert Mesh(list(range(4)), (2, 2)).shape() == OrderedDict([(0, 2), (1, 2)])


@pytest.mark.parametrize("args, message", [
    (([0, 1, 2], (2, 2)), "Number of device IDs (3) must match mesh size (4"),
    (([0, 0, 1, 2], (2, 2)), "Device IDs must be unique"),
    (([0, 1, 2, 7], (2, 2)), "Device IDs must be less than mesh size (4)"),
    (([0, 1, 2, 3], (2, 2), ("x",)), "Number of axis names 1 ('x',) must match mesh dimensions 2"),
    (([0, 1, 2, 3], (2, 2), ("x", "x")), "Axis names must be unique"),
])
def test_bad_meshes_say_what_is_wrong(args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Mesh(*args)


def test_partition_specs_translate_names_and_check_axes():
    mesh = Mesh(np.arange(8), (2, 2, 2), ("a", "b", "c"))
    assert mesh.translate(("a", None, ("b", "c"))) == (0, None, (1, 2))
    with pytest.raises(ValueError, match="Axis name z is not defined"):
        mesh.translate(("z",))
    with pytest.raises(ValueError, match="out of bound index"):
        mesh.translate((3, None))
    with pytest.raises(ValueError, match="at most once"):
        mesh.translate(("a", 0))
    with pytest.raises(ValueError, match="nested tuples"):
        mesh.translate((("a", ("b",)),))
    with pytest.raises(ValueError, match="not supported"):
        mesh.translate((1.5,))


# Tile assignments as PyTorch/XLA computes them (by hand from its definition: the mesh
# transposed so sharded axes come first, grouped axes merged).
@pytest.mark.parametrize("spec, tiles, kind", [
    ((0, 1), [[0, 1], [2, 3], [4, 5], [6, 7]], ShardingType.TILED),
    ((1, 0), [[0, 2, 4, 6], [1, 3, 5, 7]], ShardingType.TILED),
    ((0, None), [[[0, 1]], [[2, 3]], [[4, 5]], [[6, 7]]], ShardingType.PARTIAL),
    ((None, 1), [[0, 2, 4, 6], [1, 3, 5, 7]], ShardingType.PARTIAL),
    (((0, 1), None), [[0, 1, 2, 3, 4, 5, 6, 7]], ShardingType.PARTIAL),
    ((None, None), [[0, 1], [2, 3], [4, 5], [6, 7]], ShardingType.REPLICATED),
])
def test_tile_assignment_and_sharding_type(spec, tiles, kind):
    mesh = Mesh(np.arange(8), (4, 2))
    got = mesh.tile_assignment(spec)
    assert got.reshape(-1).tolist() == np.array(tiles).reshape(-1).tolist()
    assert mesh.sharding_type(spec) == kind


def test_a_one_device_mesh_is_maximal():
    assert Mesh([0], (1,)).sharding_type((0,)) == ShardingType.MAXIMAL


JAX_PLACEMENT = """
import json
import numpy as np
import torch_xla
from torch_xla.distributed import spmd as xs
from torch_xla.pjrt.client import client

torch_xla.device()
devices = client().global_devices
out = {}
order = np.array([3, 1, 0, 2, 7, 5, 4, 6])  # a mesh in a custom device order
for name, mesh, spec, shape in [
    ("2d", xs.Mesh(np.arange(8), (4, 2), ("data", "model")), ("data", "model"), (8, 4)),
    ("custom", xs.Mesh(order, (2, 4), ("x", "y")), ("y", "x"), (8, 6)),
    ("grouped", xs.Mesh(np.arange(8), (2, 2, 2)), ((0, 2), None, 1), (8, 3, 4)),
    ("partial", xs.Mesh(np.arange(8), (4, 2), ("data", "model")), (None, "model"), (8, 4)),
]:
    sharding = mesh.sharding(spec, devices)
    block = sharding.shard_shape(shape)
    placed = {}
    for device, index in sharding.devices_indices_map(shape).items():
        tile = [(s.start or 0) // b for s, b in zip(index, block)]
        placed.setdefault(json.dumps(tile), []).append(devices.index(device))
    tiles = mesh.tile_assignment(spec)
    tiled_dims = [i for i, d in enumerate(spec) if d is not None]
    expected = {}
    for idx in np.ndindex(tiles.shape[:len(tiled_dims)]):
        tile = [0] * len(spec)
        for dim, k in zip(tiled_dims, idx):
            tile[dim] = k
        expected[json.dumps(tile)] = sorted(np.asarray(tiles[idx]).reshape(-1).tolist())
    out[name] = [{k: sorted(v) for k, v in placed.items()}, expected]
hybrid = xs.HybridMesh(ici_mesh_shape=(2, 4), axis_names=("a", "b"))
out["hybrid"] = [hybrid.mesh_shape, sorted(hybrid.device_ids.tolist())]
out["1d"] = [xs.get_1d_mesh("data").mesh_shape, xs.get_1d_mesh().axis_names]
jm = xs.Mesh([3, 1, 0, 2, 7, 6, 5, 4], (2, 4), ("x", "y")).get_jax_mesh()
out["jax"] = [[[d.id for d in row] for row in jm.devices], list(jm.axis_names)]
print(json.dumps(out))
"""


def test_jax_places_every_tile_on_the_device_pytorch_xla_names():
    done = run_python(JAX_PLACEMENT, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "8"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("2d", "custom", "grouped", "partial"):
        placed, expected = out[name]
        assert placed == expected, name
    assert out["hybrid"] == [[2, 4], list(range(8))]
    assert out["1d"] == [[8], None]
    assert out["jax"] == [[[3, 1, 0, 2], [7, 6, 5, 4]], ["x", "y"]]
