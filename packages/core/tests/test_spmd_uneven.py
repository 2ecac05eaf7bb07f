"""SPMD with tiles that do not divide the tensor (`lazy/sharding.py`): the annotation stays
on the tensor (through a step, in the sharding text and the debug info), `local_shards`
gives PyTorch/XLA's zero-padded tiles, and `_global_tensor_from_cpu_shards` /
`load_local_shards_` take them back.

Each case runs in a fresh interpreter with 4 CPU devices. Reference: the same values
computed by PyTorch on the CPU (exact: only copies and slicing are involved).
"""

from __future__ import annotations

import conftest

PRELUDE = """
import math
import numpy as np, torch, torch_xla, torch_xla.runtime as xr
import torch.nn.functional as F
import torch_xla.distributed.spmd as xs
xr.use_spmd()
n = xr.global_runtime_device_count()
spec_of = torch_xla._XLAC._get_xla_sharding_spec

def padded_tile(t, index, size):
    block = t[tuple(index)]
    pad = []
    for have, want in reversed(list(zip(block.shape, size))):
        pad += [0, want - have]
    return F.pad(block, pad)
"""


def run_spmd(body: str) -> str:
    return conftest.run_spmd(PRELUDE + body)


def test_uneven_tiles_come_zero_padded_with_their_indices():
    out = run_spmd("""
t = torch.arange(15, dtype=torch.float32).reshape(5, 3)
mesh = xs.Mesh(np.arange(n), (n,))
xt = xs.mark_sharding(t.to('xla'), mesh, (0, None))
assert xt.sharding_spec == '{devices=[4,1]0,1,2,3}', xt.sharding_spec
shards = xt.local_shards
assert [s.shard_device for s in shards] == [f'CPU:{i}' for i in range(n)]
for i, s in enumerate(shards):
    start, end = min(2 * i, 5), min(2 * i + 2, 5)
    assert s.indices == [slice(start, end, 1), slice(0, 3, 1)], s.indices
    assert s.data.shape == (2, 3) and s.replica_id == 0
    assert torch.equal(s.data, padded_tile(t, s.indices, (2, 3))), (i, s.data)
    assert torch.equal(s.unpadded_data, t[tuple(s.indices)])
assert torch.equal(xt.global_tensor.cpu(), t)

# partial replication over a 2x2 mesh: rows split in 2 (3 rows: tiles of 2), replicated
u = torch.arange(12, dtype=torch.float32).reshape(3, 4)
mesh2 = xs.Mesh(np.arange(n), (2, 2), ('x', 'y'))
xu = xs.mark_sharding(u.to('xla'), mesh2, ('x', None))
assert xu.sharding_spec == '{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}'
got = [(s.indices[0], s.replica_id) for s in xu.local_shards]
assert got == [(slice(0, 2, 1), 0), (slice(0, 2, 1), 1), (slice(2, 3, 1), 0),
               (slice(2, 3, 1), 1)], got
for s in xu.local_shards:
    assert torch.equal(s.data, padded_tile(u, s.indices, (2, 4)))
print('ok')
""")
    assert "ok" in out


def test_padded_shards_round_trip_through_from_cpu_shards_and_load():
    out = run_spmd("""
from_cpu_shards = torch_xla._XLAC._global_tensor_from_cpu_shards
t = torch.arange(14, dtype=torch.float32).reshape(7, 2)
mesh = xs.Mesh(np.arange(n), (n, 1))
sharding = mesh.get_op_sharding((0, 1))
xt = xs.mark_sharding(t.to('xla'), mesh, (0, 1))
shards = [s.data for s in xt.local_shards]
assert all(s.shape == (2, 2) for s in shards)
back = from_cpu_shards(shards, sharding, torch.Size((7, 2)))
assert torch.equal(back.cpu(), t) and spec_of(back) == spec_of(xt.global_tensor)
# the padded size itself is even: every device holds only its tile
whole = from_cpu_shards(shards, sharding)
assert tuple(whole.shape) == (8, 2)
assert torch.equal(whole.cpu()[:7], t)
# a smaller shape is fine while the excess stays within the last tile's padding
short = from_cpu_shards(shards, sharding, torch.Size((5, 2)))
assert torch.equal(short.cpu(), t[:5])
for bad in [(9, 2), (4, 2), (7,), (7, 2, 1)]:
    try:
        from_cpu_shards(shards, sharding, torch.Size(bad))
    except RuntimeError as e:
        assert 'shard' in str(e), e
    else:
        raise AssertionError(f'global shape {bad} accepted')

# writing padded tiles back keeps the annotation; the padding is dropped
new = [s.data * 10 + 1 for s in xt.local_shards]
xt.load_local_shards_([xs.XLAShard(d, s.indices, s.shard_device, s.replica_id)
                       for d, s in zip(new, xt.local_shards)])
assert torch.equal(xt.global_tensor.cpu(), t * 10 + 1)
assert spec_of(xt.global_tensor) == '{devices=[4,1]0,1,2,3}'
print('ok')
""")
    assert "ok" in out


def test_uneven_annotation_survives_a_step_and_computes_as_torch():
    out = run_spmd("""
mesh = xs.Mesh(np.arange(n), (1, n))
x = torch.randn(2, 2)
xt = x.to('xla')
xs.mark_sharding(xt, mesh, (0, 1))
spec = spec_of(xt)
assert spec == '{devices=[1,4]0,1,2,3}', spec
torch_xla.sync()
assert spec_of(xt) == spec
# a pending value annotated unevenly keeps the annotation once computed
y = xt * 3 + 1
xs.mark_sharding(y, mesh, (0, 1))
torch_xla.sync()
assert spec_of(y) == spec, spec_of(y)
assert torch.allclose(y.cpu(), x * 3 + 1)
# a graph without inputs, annotated unevenly
z = torch.ones(3, 2, device='xla') * 2
xs.mark_sharding(z, mesh, (None, 1))
torch_xla.sync()
assert spec_of(z) == '{devices=[1,4]0,1,2,3}' and torch.equal(z.cpu(), torch.full((3, 2), 2.))
xs.clear_sharding(xt)
assert spec_of(xt) == '' and torch.equal(xt.cpu(), x)
print('ok')
""")
    assert "ok" in out


def test_debug_info_shows_sharded_data_on_the_virtual_device():
    out = run_spmd("""
mesh = xs.Mesh(np.arange(n), (1, n))
even = xs.mark_sharding(torch.ones(1, 8).to('xla'), mesh, (0, 1)).global_tensor
info = torch_xla._XLAC._get_xla_tensor_debug_info(even)
for line in ['Device: SPMD:0', 'ShardingSpec: {devices=[1,4]0,1,2,3}', 'XLAShardedData',
             '  Data Device: SPMD:0', '  Data Shape: f32[1,8]',
             '  OpSharding: {devices=[1,4]0,1,2,3}', '  NumShards: 4', 'Tensor on host: None']:
    assert line in info, (line, info)
uneven = xs.mark_sharding(torch.ones(1, 6).to('xla'), mesh, (0, 1)).global_tensor
info = torch_xla._XLAC._get_xla_tensor_debug_info(uneven)
assert '  OpSharding: {devices=[1,4]0,1,2,3}' in info, info
plain = torch.ones(2, 3).to('xla') + 1
torch_xla.sync()
info = torch_xla._XLAC._get_xla_tensor_debug_info(plain)
assert 'Data Shape: f32[2,3]\\n  OpSharding: {replicated}' in info, info
pending = torch_xla._XLAC._get_xla_tensor_debug_info(plain * 2)
assert 'XLAData: None' in pending and 'ShardingSpec: None' in pending, pending
print('ok')
""")
    assert "ok" in out
