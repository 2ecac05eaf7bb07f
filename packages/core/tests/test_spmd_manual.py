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


def test_collectives_in_the_region_combine_the_groups_shards_as_numpy_does():
    # Reference: each device's shard cut from the whole tensor in numpy, then reduced over
    # its group of devices and scattered as XLA's collectives define it.
    out = run_spmd("""
import torch_xla.core.xla_model as xm
mesh = xs.Mesh(np.arange(n), (1, n), ("a", "b"))
torch.manual_seed(0)
whole = torch.randn(8, 4 * n)
shards = np.split(whole.numpy(), n, axis=1)  # device d holds shards[d], (8, 4)
combine = {xm.REDUCE_SUM: np.add, xm.REDUCE_MUL: np.multiply, xm.REDUCE_MIN: np.minimum,
           xm.REDUCE_MAX: np.maximum}

def region():
    return xs.enable_manual_sharding(whole.to("xla"), (None, "b"), mesh=mesh).global_tensor

def closed(y, shape):
    return xs.disable_manual_sharding(y, (None, "b"), shape, mesh=mesh).global_tensor.cpu()

def expected_reduced(groups, reduce_type, scale):
    out = [None] * n
    for g in groups:
        total = shards[g[0]]
        for d in g[1:]:
            total = combine[reduce_type](total, shards[d])
        for d in g:
            out[d] = total * scale
    return out

pairs = [[0, 1], [2, 3]] if n == 4 else [list(range(n))]
strided = [[0, 2], [1, 3]] if n == 4 else [list(range(n))]
for groups in ([list(range(n))], pairs, strided, []):
    for reduce_type in combine:
        for scale in (1.0, 0.25):
            y = torch_xla._XLAC._xla_spmd_all_reduce(reduce_type, region(), scale, groups)
            assert torch_xla._XLAC._get_xla_sharding_spec(y) == "{manual}"
            got = closed(y, (8, 4 * n)).numpy()
            want = np.concatenate(expected_reduced(groups or [list(range(n))], reduce_type,
                                                   scale), axis=1)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

for groups in (pairs, strided):
    count = len(groups[0])
    for dim in (0, -1):
        reduced = expected_reduced(groups, xm.REDUCE_SUM, 0.5)
        pieces = [None] * n
        for g in groups:
            for i, d in enumerate(g):
                pieces[d] = np.split(reduced[d], count, axis=dim)[i]
        y = torch_xla._XLAC._xla_spmd_reduce_scatter(xm.REDUCE_SUM, region(), 0.5, dim,
                                                     count, groups)
        shape = (8 // count, 4 * n) if dim == 0 else (8, 4 * n // count)
        got = closed(y, shape).numpy()
        np.testing.assert_allclose(got, np.concatenate(pieces, axis=1), rtol=1e-5, atol=1e-5)

# the collective is XLA's own, over global device ids, in the compiled graph
y = torch_xla._XLAC._xla_spmd_all_reduce(xm.REDUCE_SUM, region(), 1.0, pairs)
hlo = torch_xla._XLAC._get_xla_tensors_hlo([xs.disable_manual_sharding(
    y, (None, "b"), (8, 4 * n), mesh=mesh).global_tensor])
groups_text = "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in pairs) + "}"
assert f"replica_groups={groups_text}, use_global_device_ids=true" in hlo, hlo
assert "all-reduce(" in hlo
print("ok")
""")
    assert out.strip().splitlines()[-1] == "ok"


def test_collectives_outside_a_region_or_with_bad_groups_say_what_is_wrong():
    out = run_spmd("""
import torch_xla.core.xla_model as xm
mesh = xs.Mesh(np.arange(n), (1, n), ("a", "b"))

def error(fn):
    try:
        fn()
    except (RuntimeError, ValueError, IndexError) as e:
        return type(e).__name__ + ": " + str(e)
    raise AssertionError("no error")

plain = torch.ones(8, 8).to("xla")
print(error(lambda: torch_xla._XLAC._xla_spmd_all_reduce(xm.REDUCE_SUM, plain, 1.0, [])))
region = xs.enable_manual_sharding(torch.ones(8, 8).to("xla"), (None, "b"), mesh=mesh)
region = region.global_tensor
print(error(lambda: torch_xla._XLAC._xla_spmd_all_reduce(xm.REDUCE_SUM, region, 1.0,
                                                         [[0, 1], [1, 2, 3]])))
print(error(lambda: torch_xla._XLAC._xla_spmd_all_reduce("median", region, 1.0, [])))
print(error(lambda: torch_xla._XLAC._xla_spmd_reduce_scatter(xm.REDUCE_SUM, region, 1.0, 0,
                                                             3, [])))
print(error(lambda: torch_xla._XLAC._xla_spmd_reduce_scatter(xm.REDUCE_SUM, region, 1.0, 5,
                                                             n, [])))
""")
    lines = out.strip().splitlines()
    assert lines[0].startswith("RuntimeError: _xla_spmd_all_reduce runs inside a manual region")
    assert "enable_manual_sharding" in lines[0]
    assert lines[1].startswith("ValueError: _xla_spmd_all_reduce: groups [[0, 1], [1, 2, 3]] "
                               "must be equal-sized lists of device ids")
    assert lines[2].startswith("ValueError: Unknown reduce_type 'median'")
    assert lines[3].startswith("ValueError: _xla_spmd_reduce_scatter: shard_count 3 must be "
                               "the size of each group, 4")
    assert lines[4].startswith("IndexError: dimension 5 is out of range for a 2-d tensor")


def test_collectives_need_spmd_mode():
    done = conftest.run_python("""
        import torch, torch_xla
        import torch_xla.core.xla_model as xm
        try:
            torch_xla._XLAC._xla_spmd_all_reduce(xm.REDUCE_SUM, torch.ones(2).to("xla"), 1.0, [])
        except RuntimeError as e:
            print(e)
        """, env={"PJRT_DEVICE": "CPU"})
    assert done.returncode == 0, done.stderr
    assert "_xla_spmd_all_reduce needs SPMD mode: call torch_xla.runtime.use_spmd()" in done.stdout
