"""Manual sharding in SPMD mode (`xs.enable_manual_sharding`, `_spmd_full_to_shard_shape`,
`_spmd_shard_to_full_shape`, `xs._mark_manual_sharding`): a tensor of the region has each
device's shard shape, ops on it run per shard, and closing the region gives back the
global tensor; the graph carries XLA's manual custom calls; bad input says what is wrong.

Each case runs in a fresh interpreter with 4 CPU devices (one client per process).
Numerics reference: the same computation in PyTorch on the CPU, applied to each shard
(cut from the whole tensor with `chunk`); tolerance 1e-6 (XLA's float32 `sin` and
torch's differ in the last bit).
"""

from __future__ import annotations

import conftest

PRELUDE = """
import numpy as np, torch, torch_xla, torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs
import torch_xla.debug.metrics as met
xr.use_spmd()
n = xr.global_runtime_device_count()
"""


def run_spmd(body: str) -> str:
    return conftest.run_spmd(PRELUDE + body)


def test_ops_in_the_region_run_per_shard_and_equal_cpu():
    out = run_spmd("""
torch.manual_seed(0)
t = torch.randn(8, 8)

def per_shard(fn, spec_dims, mesh_shape):
    # the CPU reference: `fn` on every shard, the results put back where the shards were
    rows = t.chunk(mesh_shape[0], 0) if spec_dims[0] is not None else [t]
    return torch.cat([torch.cat([fn(c) for c in r.chunk(mesh_shape[1], 1)], 1)
                      if spec_dims[1] is not None else fn(r) for r in rows], 0)

def case(mesh_shape, spec, fn, full_shape, ids=tuple(range(n))):
    mesh = xs.Mesh(np.array(ids), mesh_shape, ("a", "b"))
    x = t.to("xla")
    xx = xs.enable_manual_sharding(x, spec, mesh=mesh)
    tile = tuple(d // (mesh_shape[i] if spec[i] is not None else 1) for i, d in enumerate(t.shape))
    assert tuple(xx.shape) == tile, (spec, xx.shape)
    assert xx.sharding_spec == "{manual}" and xx.sharding_type == xs.ShardingType.MANUAL
    y = fn(xx)
    out = xs.disable_manual_sharding(y, spec, full_shape, mesh=mesh)
    assert tuple(out.shape) == full_shape
    expected = per_shard(fn, spec, mesh_shape)
    got = out.cpu()
    assert torch.allclose(got, expected, rtol=1e-6, atol=1e-6), (
        mesh_shape, spec, (got - expected).abs().max())
    # the value outside the region is laid out as the spec says
    assert out.sharding_spec == torch_xla._XLAC._get_xla_sharding_spec(
        xs.mark_sharding(torch.zeros(full_shape).to("xla"), mesh, spec)), out.sharding_spec

elementwise = lambda s: torch.sin(s) * 2 + 1
case((1, n), (None, "b"), elementwise, (8, 8))
case((n, 1), ("a", None), elementwise, (8, 8))
case((2, 2), ("a", "b"), elementwise, (8, 8))
# not elementwise: each device sums its own columns (a (8, 1) shard per device)
case((1, n), (None, "b"), lambda s: s.sum(dim=1, keepdim=True), (8, n))
# a mesh in another device order: shards still follow the mesh's positions
case((1, n), (None, "b"), lambda s: s.sum(dim=1, keepdim=True), (8, n), ids=(3, 1, 2, 0))
# each device multiplies its (4, 4) shard by part of its transpose: (4, 2) per device
case((2, 2), ("a", "b"), lambda s: s @ s.T[:, :2], (8, 4))
print("ok")
""")
    assert out.strip().endswith("ok")


def test_the_upstream_entry_points_and_the_graph_they_record():
    out = run_spmd("""
mesh = xs.Mesh(np.arange(n), (1, n))
spec = (0, 1)
t = torch.arange(64.0).reshape(8, 8)
x = t.to("xla")
xs.mark_sharding(x, mesh, spec)
xx = torch_xla._XLAC._spmd_full_to_shard_shape(x)
assert torch_xla._XLAC._get_xla_sharding_spec(xx) == "{manual}"
hlo = torch_xla._XLAC._get_xla_tensors_hlo([xx])
assert 'custom_call_target="SPMDFullToShardShape", sharding={manual}' in hlo, hlo
xx = xx * 3
xs._mark_manual_sharding(xx)
hlo = torch_xla._XLAC._get_xla_tensors_hlo([xx])
assert 'custom_call_target="Sharding", sharding={manual}' in hlo, hlo
full = torch_xla._XLAC._spmd_shard_to_full_shape(
    xx, mesh.get_op_sharding(spec), x.shape, x.dtype)
hlo = torch_xla._XLAC._get_xla_tensors_hlo([full])
assert 'custom_call_target="SPMDShardToFullShape", sharding={devices=[1,4]' in hlo, hlo
assert torch_xla._XLAC._get_xla_sharding_spec(full) == "{devices=[1,4]0,1,2,3}"
assert torch.equal(full.cpu(), t * 3)
# OpSharding: replicated and tiled as PyTorch/XLA builds them
replicated = torch_xla._XLAC.OpSharding([], [], [], xs.ShardingType.REPLICATED)
y = torch_xla._XLAC._spmd_full_to_shard_shape(x) + 1
xs._mark_manual_sharding(y)
whole = torch_xla._XLAC._spmd_shard_to_full_shape(y, replicated, (8, 2), y.dtype)
assert torch_xla._XLAC._get_xla_sharding_spec(whole) == "{replicated}"
assert tuple(whole.shape) == (8, 2)
tiled = torch_xla._XLAC.OpSharding([[0, 1, 2, 3]], [], [], xs.ShardingType.TILED)
z = torch_xla._XLAC._spmd_full_to_shard_shape(x) - 1
xs._mark_manual_sharding(z)
back = torch_xla._XLAC._spmd_shard_to_full_shape(z, tiled, (8, 8), z.dtype)
assert torch.equal(back.cpu(), t - 1)
# a step with a manual region compiles once
for step in range(3):
    w = xs.enable_manual_sharding(t.to("xla"), spec, mesh=mesh) * 2
    w = xs.disable_manual_sharding(w, spec, (8, 8), mesh=mesh)
    assert torch.equal(w.cpu(), t * 2)
    if step == 1:
        compiled = met.counter_value("UncachedCompile")
assert met.counter_value("UncachedCompile") == compiled
print("ok")
""")
    assert out.strip().endswith("ok")


def test_bad_input_says_what_is_wrong():
    out = run_spmd("""
def fails(fn, error, words):
    try:
        fn()
    except error as e:
        assert words in str(e), str(e)
    else:
        raise AssertionError(f"no {error.__name__}")

mesh = xs.Mesh(np.arange(n), (1, n))
x = torch.zeros(8, 8).to("xla")
fails(lambda: xs._mark_manual_sharding(x), RuntimeError, "data tensors")
fails(lambda: torch_xla._XLAC._spmd_full_to_shard_shape(x), RuntimeError, "not sharded")
y = x + 1
fails(lambda: torch_xla._XLAC._spmd_shard_to_full_shape(y, mesh.get_op_sharding((0, 1)),
                                                         (8, 8), y.dtype),
      RuntimeError, "not manual sharded")
xx = xs.enable_manual_sharding(x, (0, 1), mesh=mesh)
fails(lambda: xs.disable_manual_sharding(xx + 1, (0, 1), (8, 4), mesh=mesh), RuntimeError,
      "shards of shape (8, 1)")
fails(lambda: xs.disable_manual_sharding(xx + 1, (0,), (8, 8), mesh=mesh), ValueError,
      "one entry per dim")
fails(lambda: torch_xla._XLAC._spmd_full_to_shard_shape(xx), RuntimeError, "already")
uneven = xs.Mesh(np.arange(n), (n, 1))
fails(lambda: xs.enable_manual_sharding(torch.zeros(6, 8).to("xla"), (0, None), mesh=uneven),
      RuntimeError, "even shards")
fails(lambda: torch_xla._XLAC.OpSharding([[0, 1], [2, 3]], [[0]], [[0]],
                                         xs.ShardingType.PARTIAL), ValueError,
      "mesh.get_op_sharding")
print("ok")
""")
    assert out.strip().endswith("ok")
