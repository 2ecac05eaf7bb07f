"""SPMD mode end to end (`xr.use_spmd`, `xs.mark_sharding`, the virtual device): sharded
training equals eager CPU training, every device holds only its tiles, the compiled graph
carries the shardings, a step compiles once, and bad input says what is wrong.

Each case runs in a fresh interpreter with several CPU devices (one client per process).
Numerics reference: the same model trained in eager PyTorch on the CPU; tolerance 1e-5
(float32 sums over sharded dims are reduced in another order).
"""

from __future__ import annotations

import json
import sys

import conftest
import numpy as np
import pytest
import torch
from conftest import run_python

from torch_xla.utils import serialization

EXPECT_ERROR = """
def expect_error(call, error, *words):
    try:
        call()
    except error as e:
        for w in words:
            assert w in str(e), e
    else:
        raise AssertionError(f"no {error.__name__}: {words[0]}")
"""

PRELUDE = EXPECT_ERROR + """
import numpy as np, torch, torch_xla, torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs
import torch_xla.debug.metrics as met
xr.use_spmd()
n = xr.global_runtime_device_count()
"""


def run_spmd(body: str, devices: int = 4) -> str:
    done = run_python(PRELUDE + body, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices)},
                      timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


TRAINING = """
def model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))

torch.manual_seed(0)
batches = [(torch.randn(16, 16), torch.randn(16, 8)) for _ in range(3)]
ref = model()
opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
for x, y in batches:
    opt.zero_grad(); torch.nn.functional.mse_loss(ref(x), y).backward(); opt.step()

def train(case, mesh_shape, param_specs, input_spec, input_mesh_shape=None,
          input_device_ids=None):
    dev = torch_xla.device()
    net = model().to(dev)
    mesh = xs.Mesh(np.arange(n), mesh_shape, ("data", "model"))
    input_mesh = xs.Mesh(np.arange(n) if input_device_ids is None else input_device_ids,
                         input_mesh_shape or mesh_shape, ("data", "model"))
    for name, spec in param_specs.items():
        xs.mark_sharding(net.get_parameter(name), mesh, spec)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for step, (x, y) in enumerate(batches):
        x, y = x.to(dev), y.to(dev)
        xs.mark_sharding(x, input_mesh, input_spec)
        opt.zero_grad(); torch.nn.functional.mse_loss(net(x), y).backward(); opt.step()
        torch_xla.sync()
        if step == 1:
            compiled = met.counter_value("UncachedCompile")
    assert met.counter_value("UncachedCompile") == compiled, (case, "the third step compiled")
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        error = (p.cpu() - q.detach()).abs().max().item()
        assert error <= 1e-5, (case, name, error)
        spec = param_specs.get(name)
        if spec is not None:
            # the parameter stays sharded across steps: each device holds only its tile
            shards = xs.XLAShardedTensor(p).local_shards
            axes = [a for a in spec if a]
            parts = int(np.prod([mesh.mesh_shape[mesh.get_axis_name_idx(a)] for a in axes]))
            assert len(shards) == n, (case, name)
            assert all(s.data.numel() == p.numel() // parts for s in shards), (
                case, name, torch_xla._XLAC._get_xla_sharding_spec(p),
                [s.data.shape for s in shards])
    print(case, "ok")

# mesh (data, model), parameter specs, input spec
train("data_parallel", (n, 1), {}, ("data", None))
train("column_parallel", (1, n), {"0.weight": ("model", None), "0.bias": ("model",)},
      (None, None))
train("row_parallel", (1, n), {"2.weight": (None, "model")}, (None, None))
train("two_d", (2, n // 2), {"0.weight": ("model", None), "2.weight": (None, "model")},
      ("data", None))
# a weight tiled over both axes of a 2-d mesh (momentum buffers follow it)
train("tiled_2d", (2, n // 2), {"0.weight": ("data", "model")}, (None, None))
# weights on a 2-d mesh, the batch on a mesh of another shape (PyTorch/XLA's SPMD ImageNet
# recipe): XLA lays outputs out in ways jax cannot name on the batch's mesh
train("two_meshes", (2, n // 2), {"0.weight": ("data", None), "2.weight": (None, "data")},
      ("data", "model"), input_mesh_shape=(n, 1))
# ... and on a mesh that orders the devices otherwise
train("reordered_meshes", (2, n // 2), {"0.weight": ("data", None), "2.weight": (None, "data")},
      ("data", None), input_mesh_shape=(n, 1), input_device_ids=np.arange(n)[::-1].copy())
"""


@pytest.mark.parametrize("devices", [4, 8])
def test_sharded_training_equals_eager_cpu(devices):
    """Data-, column-, row- and 2-d-parallel training of an MLP (3 SGD steps)."""
    out = run_spmd(TRAINING, devices)
    for case in ("data_parallel", "column_parallel", "row_parallel", "two_d", "tiled_2d",
                 "two_meshes", "reordered_meshes"):
        assert f"{case} ok" in out, out


def test_annotations_reach_the_compiled_graph_and_the_sharding_text():
    out = run_spmd("""
mesh = xs.Mesh(np.arange(n), (2, 2), ("x", "y"))
t = torch.randn(8, 4)
xt = t.to("xla")
assert torch_xla._XLAC._get_xla_sharding_spec(xt) == ""    # host data: nothing chose a layout
xst = xs.mark_sharding(xt, mesh, ("x", "y"))
assert torch_xla._XLAC._get_xla_sharding_spec(xt) == "{devices=[2,2]0,1,2,3}"
assert xst.sharding_type == xs.ShardingType.TILED
shards = xst.local_shards
assert [s.shard_device for s in shards] == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
assert [tuple(s.data.shape) for s in shards] == [(4, 2)] * 4
assert torch.equal(shards[3].data, t[4:, 2:])
# a pending value gets a constraint; partial replication is written as upstream does
y = xt * 2
xs.mark_sharding(y, mesh, ("x", None))
assert torch_xla._XLAC._get_xla_sharding_spec(y) == \
    "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"
hlo = torch_xla._XLAC._get_xla_tensors_hlo([y])
assert 'custom_call_target="Sharding"' in hlo and "sharding={devices=[2,2]" in hlo, hlo
torch_xla.sync()
assert torch.equal(y.cpu(), t * 2)
assert "last_tile_dim_replicate" in torch_xla._XLAC._get_xla_sharding_spec(y)
assert met.counter_value("ExecuteReplicated") >= 1
# a custom device order is written with global device ids
flipped = xs.Mesh(np.array([3, 2, 1, 0]), (1, 4))
z = torch.arange(8.0).to("xla")
xs.mark_sharding(z, flipped, (1,))
assert torch_xla._XLAC._get_xla_sharding_spec(z) == "{devices=[4]3,2,1,0}"
assert [s.shard_device for s in xs.XLAShardedTensor(z).local_shards][0] == "CPU:0"
assert torch.equal(xs.XLAShardedTensor(z).local_shards[0].data, torch.tensor([6.0, 7.0]))
# clear_sharding: replicated again, same value
xs.clear_sharding(xt)
assert torch_xla._XLAC._get_xla_sharding_spec(xt) == ""
assert torch.equal(xt.cpu(), t)
print("ok")
""")
    assert out.strip().endswith("ok")


def test_backward_optimization_barrier_holds_a_modules_gradients():
    """`xs.apply_backward_optimization_barrier(m)`: the gradients of m's parameters and
    those flowing out of m go through one optimization barrier (as PyTorch/XLA's), and
    every gradient still equals eager PyTorch's on the CPU."""
    out = run_spmd("""
import copy, re
torch.manual_seed(0)
ref = torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
model = copy.deepcopy(ref).to("xla")
xs.apply_backward_optimization_barrier(model[2])
x = torch.randn(2, 128)
model(x.to("xla")).sum().backward()
ref(x).sum().backward()
hlo = torch_xla._XLAC._get_xla_tensors_hlo([model[2].weight.grad])
barrier = [line for line in hlo.splitlines() if " opt-barrier(" in line]
assert len(barrier) == 1, hlo
shapes = re.sub(r"\\{[0-9,]*\\}", "", barrier[0].split(" = ")[1].split(") opt-barrier")[0])
assert shapes == "(f32[1,64], f32[1], f32[2,64]", shapes
for (name, p), (_, r) in zip(model.named_parameters(), ref.named_parameters()):
    assert torch.allclose(p.grad.cpu(), r.grad, atol=1e-5), name
print("ok")
""")
    assert out.strip().endswith("ok")


def test_a_marked_tensor_keeps_its_sharding_through_in_place_updates():
    """PyTorch/XLA keeps a sharding on the tensor: an in-place op's new value (pending, or
    device data after a sync, or written from the host) is laid out as marked."""
    out = run_spmd("""
mesh = xs.Mesh(np.arange(n), (1, n))
t = torch.arange(16.0).reshape(2, 8)
xt = t.to("xla")
xs.mark_sharding(xt, mesh, (0, 1))
spec = torch_xla._XLAC._get_xla_sharding_spec(xt)
assert spec == "{devices=[1,4]0,1,2,3}", spec
xt.add_(1)
assert torch_xla._XLAC._get_xla_sharding_spec(xt) == spec
hlo = torch_xla._XLAC._get_xla_tensors_hlo([xt])
assert 'custom_call_target="Sharding"' in hlo, hlo
torch_xla.sync()
assert torch_xla._XLAC._get_xla_sharding_spec(xt) == spec
assert [tuple(s.data.shape) for s in xs.XLAShardedTensor(xt).local_shards] == [(2, 2)] * 4
assert torch.equal(xt.cpu(), t + 1)
# a write from the host, a write through a view, and steps of an optimizer
xt.copy_(torch.ones(2, 8))
xt[0].mul_(3)
torch_xla.sync()
assert torch_xla._XLAC._get_xla_sharding_spec(xt) == spec
assert torch.equal(xt.cpu(), torch.tensor([[3.0] * 8, [1.0] * 8]))
w = torch.nn.Parameter(torch.ones(4, 8).to("xla"))
xs.mark_sharding(w, mesh, (None, 1))
opt = torch.optim.Adam([w], lr=0.1)
for _ in range(2):
    opt.zero_grad(); (w * w).sum().backward(); opt.step(); torch_xla.sync()
assert torch_xla._XLAC._get_xla_sharding_spec(w) == "{devices=[1,4]0,1,2,3}"
assert [tuple(s.data.shape) for s in xs.XLAShardedTensor(w).local_shards] == [(4, 2)] * 4
# cleared: the next update is not laid out again
xs.clear_sharding(xt)
xt.add_(1)
torch_xla.sync()
assert torch_xla._XLAC._get_xla_sharding_spec(xt) in ("", "{replicated}"), \
    torch_xla._XLAC._get_xla_sharding_spec(xt)
print("ok")
""")
    assert out.strip().endswith("ok")


def test_sharded_data_is_not_marked_again_another_way_but_can_get_a_custom_sharding():
    """`mark_sharding` refuses to re-lay sharded data (PyTorch/XLA's 'Existing annotation
    must be cleared first'); `annotate_custom_sharding` lays it out anew inside the next
    program, and the result keeps the new layout."""
    out = run_spmd("""
t = torch.randn(2, 4, 8, 8)
xt = t.to("xla")
xs.mark_sharding(xt, xs.Mesh(np.arange(n), (1, 1, 2, 2)), (0, 1, 2, 3))
original = torch_xla._XLAC._get_xla_sharding_spec(xt)
xs.mark_sharding(xt, xs.Mesh(np.arange(n), (1, 1, 2, 2)), (0, 1, 2, 3))   # the same: fine
other = xs.Mesh(np.arange(n), (1, 1, 1, n))
expect_error(lambda: xs.mark_sharding(xt, other, (0, 1, 2, 3)), RuntimeError,
             "Existing annotation must be cleared first", "xs.clear_sharding")
assert torch_xla._XLAC._get_xla_sharding_spec(xt) == original
xs.annotate_custom_sharding(xt, other, (0, 1, 2, 3))
custom = torch_xla._XLAC._get_xla_sharding_spec(xt)
assert custom == "{devices=[1,1,1,4]0,1,2,3}" and custom != original, custom
hlo = torch_xla._XLAC._get_xla_tensors_hlo([xt])
assert "%p0.1 = f32[2,4,8,8]{3,2,1,0} parameter(0), sharding={devices=[1,1,2,2]0,1,2,3}" \
    in hlo, hlo                                                   # the data as it is
assert 'custom-call(f32[2,4,8,8]{3,2,1,0} %p0.1), custom_call_target="Sharding", ' \
    'sharding={devices=[1,1,1,4]0,1,2,3}' in hlo, hlo
torch_xla.sync()
assert torch_xla._XLAC._get_xla_sharding_spec(xt) == custom
assert [tuple(s.data.shape) for s in xs.XLAShardedTensor(xt).local_shards] == [(2, 4, 8, 2)] * 4
assert torch.equal(xt.cpu(), t)
# cleared, it can be marked any way
xs.clear_sharding(xt)
xs.mark_sharding(xt, xs.Mesh(np.arange(n), (1, n, 1, 1)), (0, 1, 2, 3))
assert torch_xla._XLAC._get_xla_sharding_spec(xt) == "{devices=[1,4,1,1]0,1,2,3}"
assert torch.equal(xt.cpu(), t)
print("ok")
""")
    assert out.strip().endswith("ok")


def test_shard_alike_is_found_where_jax_keeps_it(monkeypatch):
    """jax 0.11 has no `jax.experimental.shard_alike` (seen on a GPU image): the finder
    goes on to jax's other homes of the function, and gives None (xs.shard_as then says
    what to install) where none has it."""
    import importlib

    from jax._src.shard_alike import shard_alike

    from torch_xla.lazy import sharding

    assert sharding._jax_shard_alike() is shard_alike  # jax 0.10: the experimental module
    real = importlib.import_module
    gone: set[str] = {"jax.experimental.shard_alike"}

    def import_module(name, *args):
        if name in gone:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(sharding.importlib, "import_module", import_module)
    assert sharding._jax_shard_alike() is shard_alike
    gone.add("jax._src.shard_alike")
    assert sharding._jax_shard_alike() is None


def test_shard_as_lays_two_tensors_out_alike_and_their_gradients_too():
    out = run_spmd("""
mesh = xs.Mesh(np.arange(n), (n,))
x = torch.arange(8.0, device="xla")
x = xs.mark_sharding_with_gradients(x, mesh, (0,))
y = torch.arange(8.0, device="xla") * 2
x, y = xs.shard_as(x, y)
torch_xla.sync()
assert torch_xla._XLAC._get_xla_sharding_spec(x) == "{devices=[4]0,1,2,3}"
assert torch_xla._XLAC._get_xla_sharding_spec(y) == "{devices=[4]0,1,2,3}"
assert torch.equal(y.cpu(), torch.arange(8.0) * 2)
# pytrees, None leaves, and gradients
a = torch.randn(8, 4, requires_grad=True)
b = torch.randn(8, 4, requires_grad=True)
xa = a.detach().to("xla").requires_grad_()
xb = b.detach().to("xla").requires_grad_()
ma = xs.mark_sharding_with_gradients(xa, xs.Mesh(np.arange(n), (n, 1)), (0, None))
(oa, none_a), (ob, none_b) = xs.shard_as((ma, None), (xb, None))
assert none_a is None and none_b is None
(oa * ob).sum().backward()
torch_xla.sync()
assert torch.allclose(xa.grad.cpu(), b) and torch.allclose(xb.grad.cpu(), a)
for bad, words in [(((x,), (y, y)), "same structure"), (((x, None), (None, y)), "None in both"),
                   ((x, torch.zeros(3, device="xla")), "of one shape")]:
    expect_error(lambda: xs.shard_as(*bad), ValueError, words)
# nn.Linear patched to einsums keeps its (sharded) parameters and computes the same
from torch_xla.distributed.spmd.xla_sharding import EinsumLinear, apply_xla_patch_to_nn_linear
torch.manual_seed(0)
ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Sequential(torch.nn.Linear(8, 2)))
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Sequential(torch.nn.Linear(8, 2)))
net.load_state_dict(ref.state_dict())
net = net.to("xla")
xs.mark_sharding(net[0].weight, xs.Mesh(np.arange(n), (n, 1)), (0, None))
apply_xla_patch_to_nn_linear(net)
assert type(net[0]) is EinsumLinear and type(net[1][0]) is EinsumLinear
assert torch_xla._XLAC._get_xla_sharding_spec(net[0].weight) == "{devices=[4,1]0,1,2,3}"
inp = torch.randn(3, 4)
out = net(inp.to("xla"))
out.sum().backward(); ref(inp).sum().backward()
assert torch.allclose(out.cpu(), ref(inp), atol=1e-5)
assert torch.allclose(net[0].weight.grad.cpu(), ref[0].weight.grad, atol=1e-5)
print("ok")
""")
    assert out.strip().endswith("ok")


def test_torch_dtensor_api_on_an_xla_device_mesh():
    """torch's `distribute_tensor`/`distribute_module` with DeviceMesh('xla', ...) come to
    `xs.xla_distribute_tensor`/`xla_distribute_module`: placements become partition specs,
    and a module sharded through them trains as eager CPU PyTorch does."""
    out = run_spmd("""
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_module, distribute_tensor
mesh = DeviceMesh("xla", np.arange(n).reshape(2, 2).tolist(), mesh_dim_names=("a", "b"))
assert xs.convert_to_xla_mesh(mesh).mesh_shape == (2, 2)
assert xs.convert_to_xla_mesh(mesh).axis_names == ("a", "b")
t = torch.randn(8, 4)
cases = [([Shard(0), Replicate()], (0, None), "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"),
         ([Shard(1), Shard(0)], (1, 0), "{devices=[2,2]0,2,1,3}"),
         ([Shard(0), Shard(0)], ((0, 1), None), "{devices=[4,1]0,1,2,3}"),
         ([Replicate(), Shard(-1)], (None, 1), "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}")]
for placements, spec, text in cases:
    assert xs.convert_to_xla_partition_spec(t, placements) == spec, placements
    d = distribute_tensor(t, mesh, placements)
    assert isinstance(d, xs.XLAShardedTensor) and d.sharding_spec == text, (placements, d)
    assert torch.equal(d.cpu(), t)
assert distribute_tensor(t, mesh).sharding_spec in ("", "{replicated}")
for bad, words in [(lambda: distribute_tensor(t, mesh, [Partial(), Replicate()]), "Partial"),
                   (lambda: distribute_tensor(t, mesh, [Shard(0)]), "one placement per mesh dim"),
                   (lambda: distribute_tensor(t, mesh, [Shard(2), Replicate()]), "has 2 dims"),
                   (lambda: distribute_tensor(distribute_tensor(t, mesh, [Shard(0), Shard(1)]),
                                              mesh, [Shard(1), Shard(0)]), "clear it first")]:
    expect_error(bad, ValueError, words)

# a column-parallel first layer, the batch sharded by an input_fn, against eager CPU
def model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))
torch.manual_seed(0)
x, y = torch.randn(16, 16), torch.randn(16, 8)
ref = model()
opt = torch.optim.SGD(ref.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad(); torch.nn.functional.mse_loss(ref(x), y).backward(); opt.step()
mesh1 = init_device_mesh("xla", (n,))
def partition(name, module, device_mesh):
    if name == "0":
        for pname, p in list(module.named_parameters(recurse=False)):
            sharded = distribute_tensor(p.data, device_mesh, [Shard(0)])
            module.register_parameter(pname, torch.nn.Parameter(sharded.global_tensor))
seen = []
def input_fn(module, inputs, device_mesh):
    seen.append(distribute_tensor(inputs[0], device_mesh, [Shard(0)]).sharding_spec)
net = distribute_module(model().to("xla"), mesh1, partition, input_fn=input_fn)
assert torch_xla._XLAC._get_xla_sharding_spec(net[0].weight) == "{devices=[4,1]0,1,2,3}"
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad()
    torch.nn.functional.mse_loss(net(x.to("xla")), y.to("xla")).backward()
    opt.step(); torch_xla.sync()
assert seen == ["{devices=[4,1]0,1,2,3}"] * 2, seen
assert [tuple(s.data.shape) for s in xs.XLAShardedTensor(net[0].weight).local_shards] == \
    [(8, 16)] * 4
for p, q in zip(net.parameters(), ref.parameters()):
    assert (p.cpu() - q.detach()).abs().max().item() <= 1e-5
print("ok")
""")
    assert out.strip().endswith("ok")


def test_a_sharded_tensor_describes_its_layout_as_dtensor_does():
    """`_spec`, `placements`, `device_mesh` name the layout mark_sharding/distribute_tensor
    gave (axis names, permuted ids, a dim over two axes); op results have none, and say so;
    `redistribute` and `wrap_as_sharded_tensor` lay the tensor out anew, so what they
    record stays true of the data."""
    out = run_spmd("""
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor._dtensor_spec import ShardOrderEntry
torch.manual_seed(0)
t = torch.randn(8, 4)
mesh = DeviceMesh("xla", np.arange(n).reshape(2, 2).tolist(), mesh_dim_names=("a", "b"))
d = distribute_tensor(t, mesh, [Shard(1), Replicate()])
assert d.placements == (Shard(1), Replicate()) and d.device_mesh is mesh
assert d._spec is d._spec and d._spec.tensor_meta.shape == t.shape
assert (d.mesh_shape, d.partition_spec) == ((2, 2), (None, 0))

ids = [3, 1, 2, 0]
m = xs.Mesh(ids, (2, 2), ("x", "y"))
w = xs.mark_sharding(t.to("xla"), m, (("x", "y"), None))
assert w.placements == (Shard(0), Shard(0)), w.placements
assert w._spec.shard_order == (ShardOrderEntry(tensor_dim=0, mesh_dims=(0, 1)),)
assert w.device_mesh.mesh.flatten().tolist() == ids
assert w.device_mesh.mesh_dim_names == ("x", "y")
w2 = xs.mark_sharding(t.to("xla"), m, (None, ("y", "x")))
assert w2._spec.shard_order == (ShardOrderEntry(tensor_dim=1, mesh_dims=(1, 0)),)

r = d + 1  # XLA's partitioner chooses a result's layout: none is recorded
expect_error(lambda: r._spec, ValueError, "mesh_shape", "wrap_as_sharded_tensor")
expect_error(lambda: r.placements, ValueError, "placements")

# redistribute: the data is laid out anew and keeps its values; async_op leaves the original
mesh1 = xs.Mesh(np.arange(n), (n,))
s = xs.mark_sharding(t.to("xla"), mesh1, (0, None))
assert s.redistribute(mesh1, [Shard(1)]) is s and s.partition_spec == (None, 0)
torch_xla.sync()
assert torch_xla._XLAC._get_xla_sharding_spec(s.global_tensor) == "{devices=[1,4]0,1,2,3}"
assert torch.equal(s.cpu(), t)
c = s.redistribute(mesh1, [Replicate()], async_op=True)
torch_xla.sync()
assert c.global_tensor is not s.global_tensor and c.placements == (Replicate(),)
assert torch_xla._XLAC._get_xla_sharding_spec(c.global_tensor) == "{replicated}"
assert torch_xla._XLAC._get_xla_sharding_spec(s.global_tensor) == "{devices=[1,4]0,1,2,3}"
assert torch.equal(c.cpu(), t)
expect_error(lambda: s.redistribute(mesh1, [Shard(2)]), IndexError, "has 2 dims")
expect_error(lambda: s.redistribute(mesh1, [Shard(0), Shard(1)]), ValueError, "one per mesh dim")
expect_error(lambda: s.redistribute(mesh1, [Partial()]), NotImplementedError, "Partial")

# wrap_as_sharded_tensor with a layout lays an XLA tensor out that way
u = xs.wrap_as_sharded_tensor(t.to("xla"), mesh_shape=(2, 2), partition_spec=(0, 1))
torch_xla.sync()
assert torch_xla._XLAC._get_xla_sharding_spec(u.global_tensor) == "{devices=[2,2]0,1,2,3}"
assert u.placements == (Shard(0), Shard(1)) and torch.equal(u.cpu(), t)
print("ok")
""")
    assert out.strip().endswith("ok")


def test_a_sharded_tensor_passes_gradients_to_what_it_wraps():
    """A wrapper of a tensor that requires grad passes gradients into it (`to_local()` is
    that tensor); `requires_grad=True` on one that does not makes a fresh leaf. Reference:
    the gradient of sum(x * x) in eager PyTorch on the CPU."""
    out = run_spmd("""
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Shard
mesh = DeviceMesh("xla", list(range(n)))
x = torch.randn(8, 4)
ref = x.clone().requires_grad_()
(ref * ref).sum().backward()
leaf = x.to("xla").requires_grad_()
w = xs.XLAShardedTensor(leaf, mesh, [Shard(0)])
assert w.requires_grad and w.placements == (Shard(0),) and w.to_local() is leaf
(w * w).sum().backward()
assert torch.allclose(w.to_local().grad.cpu(), ref.grad) and torch.allclose(w.grad.cpu(), ref.grad)
fresh = xs.XLAShardedTensor(x.to("xla"), requires_grad=True)
fresh.sum().backward()
assert torch.equal(fresh.grad.cpu(), torch.ones_like(x))
frozen = xs.XLAShardedTensor(x.to("xla").requires_grad_(), requires_grad=False)
assert not frozen.requires_grad and not frozen.to_local().requires_grad
print("ok")
""")
    assert out.strip().endswith("ok")


def test_a_marked_placeholder_is_a_sharded_parameter_of_the_traced_graph():
    """mark_sharding on a placeholder copies nothing: the program parameter it stands for
    gets the sharding, and reading it still says there is no value."""
    out = run_spmd("""
from torch_xla.core.xla_builder import create_placeholder_tensor
mesh = xs.Mesh(np.arange(n), (2, 2), ("x", "y"))
p = create_placeholder_tensor((8, 4), torch.float32)
xs.mark_sharding(p, mesh, ("x", "y"))
assert torch_xla._XLAC._is_placeholder(p)
assert torch_xla._XLAC._get_xla_sharding_spec(p) == "{devices=[2,2]0,1,2,3}"
hlo = torch_xla._XLAC._get_xla_tensors_hlo([torch.sin(p)])
params = [l for l in hlo.splitlines() if "parameter(0)" in l]
assert len(params) == 1 and "sharding={devices=[2,2]0,1,2,3}" in params[0], hlo
assert not met.metric_data("TransferToDeviceTime")
expect_error(lambda: p.cpu(), RuntimeError, "no value to read")
print("ok")
""")
    assert out.strip().endswith("ok")


def test_tensors_on_meshes_of_different_device_orders_meet_in_one_program():
    """A program reads tensors of meshes that order the devices differently, and takes
    constraints on them: each tensor keeps its tiles where they were (no data moves), the
    results are the CPU's, and the program is compiled once."""
    out = run_spmd("""
t = torch.arange(32.).reshape(8, 4)
reordered, plain = xs.Mesh([3, 1, 2, 0], (2, 2)), xs.Mesh(np.arange(n), (2, 2))
a = xs.mark_sharding(t.to("xla"), reordered, (0, 1))
b = xs.mark_sharding((3 * t).to("xla"), plain, (0, 1))
before = {s.shard_device: s.data for s in a.local_shards}
assert torch.equal(before["CPU:3"], t[:4, :2]) and torch.equal(before["CPU:0"], t[4:, 2:])

def step():
    c = a.global_tensor + b.global_tensor
    d = c * 2
    xs.mark_sharding(d, reordered, (1, 0))   # a constraint on the other order
    torch_xla.sync()
    return c, d

c, d = step()
compiled = met.counter_value("UncachedCompile")
assert torch.equal(c.cpu(), 4 * t) and torch.equal(d.cpu(), 8 * t)
# the constrained result is laid out as marked: tile (i, j) on [[3, 1], [2, 0]][j][i]
assert torch_xla._XLAC._get_xla_sharding_spec(d) == "{devices=[2,2]3,2,1,0}"
tiles = {s.shard_device: s.data for s in xs.XLAShardedTensor(d).local_shards}
assert torch.equal(tiles["CPU:2"], 8 * t[:4, 2:]) and torch.equal(tiles["CPU:1"], 8 * t[4:, :2])
# the inputs are where they were
after = {s.shard_device: s.data for s in a.local_shards}
assert all(torch.equal(before[k], after[k]) for k in before)
c, d = step()
assert met.counter_value("UncachedCompile") == compiled   # cached
assert torch.equal(d.cpu(), 8 * t)
# inputs on one mesh only, a constraint on a mesh of another order
e = a.global_tensor * 5
xs.mark_sharding(e, plain, (None, 1))
torch_xla.sync()
assert torch.equal(e.cpu(), 5 * t)
assert torch_xla._XLAC._get_xla_sharding_spec(e) == \
    "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}", torch_xla._XLAC._get_xla_sharding_spec(e)
print("ok")
""")
    assert out.strip().endswith("ok")


def test_a_residual_block_on_a_batch_and_spatially_sharded_input_has_eager_gradients():
    """PyTorch/XLA's SPMD ImageNet recipe with `--sharding batch spatial`: images split over
    the batch and over their width. Through jaxlib 0.10's Shardy partitioner the first
    convolution's and batch norm's gradients came out twice the CPU's (and the input's
    wrong); SPMD programs are partitioned by XLA's GSPMD, as PyTorch/XLA's are."""
    out = run_spmd("""
import copy
import torch.nn as nn

class Block(nn.Module):  # torchvision's BasicBlock(8, 16, stride=2) with its downsample
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(8, 16, 3, 2, 1, bias=False); self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, 1, 1, bias=False); self.bn2 = nn.BatchNorm2d(16)
        self.down = nn.Sequential(nn.Conv2d(8, 16, 1, 2, bias=False), nn.BatchNorm2d(16))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.down(x))

mesh = xs.Mesh(np.arange(n), (2, n // 2), ("batch", "width"))
torch.manual_seed(0)
m = Block()
mx = copy.deepcopy(m).to("xla")
x, g = torch.randn(4, 8, 4, 4), torch.randn(4, 16, 2, 2)
xc = x.clone().requires_grad_(True)
(m(xc) * g).sum().backward()
xx = x.to("xla")
xs.mark_sharding(xx, mesh, ("batch", None, "width", None))
xx.requires_grad_(True)
(mx(xx) * g.to("xla")).sum().backward()
torch_xla.sync()
torch.testing.assert_close(xx.grad.cpu(), xc.grad, atol=1e-4, rtol=1e-4)
for (name, a), b in zip(mx.named_parameters(), m.parameters(), strict=True):
    torch.testing.assert_close(a.grad.cpu(), b.grad, atol=1e-4, rtol=1e-4, msg=name)
print("ok")
""")
    assert out.strip().endswith("ok")


def test_a_constraint_on_another_mesh_than_the_inputs_lays_outputs_out_as_xla_chose():
    """Inputs on a 4x1 mesh, a constraint on a 2x2 one: XLA lays the output out tiled in 2
    and replicated in 2, which jax cannot name on the inputs' mesh; the program compiles
    again with XLA's layouts as they are, and its result feeds the next one. (Weights and
    batch on meshes of different shapes: test_sharded_training_equals_eager_cpu.)"""
    out = run_spmd("""
wmesh = xs.Mesh(np.arange(n), (2, n // 2), ("a", "b"))
imesh = xs.Mesh(np.arange(n), (n, 1), ("B", "C"))
torch.manual_seed(2)
w, x = torch.randn(8, 8), torch.randn(4, 8)
xx = xs.mark_sharding(x.to("xla"), imesh, (0, 1)).global_tensor
yy = xx @ w.to("xla")
xs.mark_sharding(yy, wmesh, (None, 0))
zz = yy * 2
torch_xla.sync()
torch.testing.assert_close(zz.cpu(), x @ w * 2, atol=1e-5, rtol=1e-5)
spec = torch_xla._XLAC._get_xla_sharding_spec
assert spec(zz) == "{devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}", spec(zz)
torch.testing.assert_close((zz + xx).cpu(), x @ w * 2 + x, atol=1e-5, rtol=1e-5)
print("ok")
""")
    assert out.strip().endswith("ok")


def test_lowering_context_parameters_carry_their_shardings_and_stay_on_the_devices():
    out = run_spmd("""
mesh = xs.Mesh(np.arange(n), (2, n // 2), ("x", "y"))
a = torch.randn(32, 64).to("xla")
xs.mark_sharding(a, mesh, ("x", "y"))
b = torch.ones(64).to("xla")
xs.mark_sharding(b, mesh, ("y",))
result = a + b
met.clear_all()
ctx = torch_xla._XLAC.lowering.LoweringContext("MyCustomName")
ctx.build([result])
torch_xla.sync()
mapping = ctx.device_parameter_id_tensor_mapping()
assert len(mapping) == 2, mapping
ids = {ctx.tensor_parameter_id(a), ctx.tensor_parameter_id(b)}
assert ids == {0, 1}, ids
assert not met.metric_data("TransferFromDeviceTime")  # no value came to the host
assert not met.counter_value("ReplicateShardedData")
text = ctx.hlo_text()
assert "MyCustomName" in text
spec = torch_xla._XLAC._get_xla_sharding_spec
for t in (a, b):
    k = ctx.tensor_parameter_id(t)
    line = [l for l in text.splitlines() if f"parameter({k})" in l][0]
    assert f"sharding={spec(t)}" in line, (line, spec(t))
    assert spec(mapping[k]) == spec(t)
print("ok")
""")
    assert out.strip().endswith("ok")


def test_mark_sharding_inside_assume_pure_is_a_constraint_of_the_recording():
    """Marking an argument (or a value) inside a pure function records a sharding
    constraint (the argument is not written to); values equal the CPU's, and gradients
    flow through mark_sharding_with_gradients."""
    out = run_spmd("""
from torch_xla.experimental.assume_pure import assume_pure
mesh = xs.Mesh(np.arange(n), (n,), ("x",))

@assume_pure
def f(a, w):
    xs.mark_sharding(a, mesh, ("x", None))
    h = xs.mark_sharding(a @ w, mesh, ("x", None))
    return torch.tanh(h)

@assume_pure
def g(a, w):
    a = xs.mark_sharding_with_gradients(a, mesh, ("x", None))
    return torch.tanh(a @ w)

torch.manual_seed(0)
a, w = torch.randn(8, 4), torch.randn(4, 3)
ref = torch.tanh(a @ w)
xa, xw = a.to("xla"), w.to("xla")
out = f(xa, xw)
hlo = torch_xla._XLAC._get_xla_tensors_hlo([out])
assert "sharding={devices=[4,1]0,1,2,3}" in hlo, hlo
assert torch.allclose(out.cpu(), ref, atol=1e-6)
assert torch_xla._XLAC._get_xla_sharding_spec(xa) == ""  # the caller's tensor: untouched
aw = w.clone().requires_grad_()
torch.tanh(a @ aw).sum().backward()
gw = xw.clone().requires_grad_()
g(xa, gw).sum().backward()
assert torch.allclose(gw.grad.cpu(), aw.grad, atol=1e-5)
print("ok")
""")
    assert out.strip().endswith("ok")


def test_shards_round_trip_through_the_host():
    out = run_spmd("""
mesh = xs.Mesh(np.arange(n), (n,))
t = torch.arange(16.0).reshape(8, 2)
xt = xs.mark_sharding(t.to("xla"), mesh, (0, None))
shards = xt.local_shards
for s in shards:
    s.data += 100
xt.load_local_shards_(shards)
assert torch.equal(xt.cpu(), t + 100)
expect_error(lambda: xt.load_local_shards_(shards[:-1]), RuntimeError, "one shard per device")
sharding = mesh.get_op_sharding((0, None))
whole = torch_xla._XLAC._global_tensor_from_cpu_shards([t[2 * k:2 * k + 2] for k in range(n)],
                                                      sharding)
assert torch.equal(whole.cpu(), t), whole.cpu()
assert torch_xla._XLAC._get_xla_sharding_spec(whole) == "{devices=[4,1]0,1,2,3}"
print("ok")
""")
    assert out.strip().endswith("ok")


def test_reading_a_sharded_tensor_leaves_no_host_copy_behind():
    """jax keeps the host value it assembles for `np.asarray` on the array while the array
    lives: each `.cpu()` of a sharded 32 MB tensor used to leave 32 MB of host memory
    held until the tensor changed (on an accelerator, every transfer did). Allocations of
    1 MB or more get mappings of their own, returned to the system when freed."""
    done = run_python(PRELUDE + """
import ctypes, gc
def rss():
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024
mesh = xs.Mesh(np.arange(n), (n, 1))
t = torch.arange(8 * 2**20, dtype=torch.float32).reshape(-1, 8)
xt = t.to("xla")
xs.mark_sharding(xt, mesh, (0, 1))
torch_xla.sync()
before = rss()
for _ in range(3):
    assert torch.equal(xt.cpu(), t)
print(round(rss() - before, 1))
""", env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4", "MALLOC_MMAP_THRESHOLD_": str(2**20)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert float(done.stdout.strip().splitlines()[-1]) < 8, done.stdout

def test_loader_input_sharding_loads_batches_sharded():
    out = run_spmd("""
import torch_xla.distributed.parallel_loader as pl
mesh = xs.Mesh(np.arange(n), (n, 1), ("data", "model"))
data = [(torch.randn(8, 3), torch.arange(8)) for _ in range(2)]
loader = pl.MpDeviceLoader(data, torch_xla.device(),
                           input_sharding=xs.ShardingSpec(mesh, ("data", None)))
for (x, y), (cx, cy) in zip(loader, data):
    assert torch_xla._XLAC._get_xla_sharding_spec(x) == "{devices=[4,1]0,1,2,3}"
    assert torch_xla._XLAC._get_xla_sharding_spec(y) == "{replicated}"  # rank 1: no fit
    assert torch.equal(x.cpu(), cx) and torch.equal(y.cpu(), cy)
print("ok")
""")
    assert out.strip().endswith("ok")


def test_send_cpu_data_to_device_lays_out_a_dict_batch_by_key():
    out = run_spmd("""
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
mesh = xs.Mesh(np.arange(n), (n, 1), ("data", "model"))
spec = torch_xla._XLAC._get_xla_sharding_spec
batch = {"x": torch.randn(8, 4), "y": (torch.randn(8, 2, 2), torch.arange(8))}
specs = {"x": xs.ShardingSpec(mesh, ("data", None)),
         "y": xs.ShardingSpec(mesh, ("data", None, None))}
dev = torch_xla.device()
for moved in (xm.send_cpu_data_to_device(batch, dev, specs),
              next(iter(pl.MpDeviceLoader([batch], dev, input_sharding=specs)))):
    x, (y, labels) = moved["x"], moved["y"]
    assert type(x) is torch.Tensor and x.device == dev  # each value as it came, not a list
    assert spec(x) == "{devices=[4,1]0,1,2,3}", spec(x)
    assert spec(y) == "{devices=[4,1,1]0,1,2,3}", spec(y)
    assert spec(labels) == "{replicated}", spec(labels)  # rank 1: no spec fits it
    assert torch.equal(x.cpu(), batch["x"]) and torch.equal(y.cpu(), batch["y"][0])
    assert torch.equal(labels.cpu(), batch["y"][1])
for data, error, words in [(batch["x"], ValueError, "input batch should be a dict"),
                           ({"x": batch["x"], "z": batch["x"], "w": 1}, KeyError,
                            "Keys: ['z', 'w'] are missing from input_sharding.")]:
    for load in (lambda: xm.send_cpu_data_to_device(data, dev, specs),
                 lambda: next(iter(pl.MpDeviceLoader([data], dev, input_sharding=specs)))):
        expect_error(load, error, words)
print("ok")
""")
    assert out.strip().endswith("ok")


def test_data_loaded_without_a_spec_is_replicated():
    out = run_spmd("""
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
spec = torch_xla._XLAC._get_xla_sharding_spec
batch = {"x": torch.randn(8, 4), "y": [torch.arange(8)]}
dev = torch_xla.device()
(single,) = xm.send_cpu_data_to_device(batch["x"], dev)
moved = xm.send_cpu_data_to_device(batch, dev)
loaded = next(iter(pl.MpDeviceLoader([batch], dev)))
for t, want in [(single, batch["x"]), (moved["x"], batch["x"]), (moved["y"][0], batch["y"][0]),
                (loaded["x"], batch["x"]), (loaded["y"][0], batch["y"][0])]:
    assert spec(t) == "{replicated}", spec(t)
    assert torch.equal(t.cpu(), want)
(weights,) = xm.send_cpu_data_to_device(torch.ones(2, 2, requires_grad=True), dev)
assert weights.requires_grad and spec(weights) == "{replicated}"  # as t.to(dev) would ask
print("ok")
""")
    assert out.strip().endswith("ok")


def test_virtual_device_counts_and_tensors_made_before_spmd():
    done = run_python("""
import torch, torch_xla, torch_xla.runtime as xr
import torch_xla.core.xla_model as xm
before = torch.arange(4.0).to("xla")
assert xr.addressable_device_count() == 4
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    xr.use_spmd()
assert any("Replicating tensors" in str(w.message) for w in caught)
assert xr.is_spmd()
assert xr.addressable_device_count() == 1 and xr.global_device_count() == 1
assert xr.global_runtime_device_count() == 4 and xr.addressable_runtime_device_count() == 4
assert xm.get_xla_supported_devices() == ["xla:0"] and xr.world_size() == 1
after = torch.ones(4).to("xla")
assert torch.equal((before + after).cpu(), torch.arange(4.0) + 1)
print("ok")
""", env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"}, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr


def test_bad_annotations_say_what_is_wrong():
    done = run_python(EXPECT_ERROR + """
import numpy as np, torch, torch_xla
import torch_xla.distributed.spmd as xs
t = torch.ones(4, 4).to("xla")
mesh = xs.Mesh(np.arange(4), (4,))
expect_error(lambda: xs.mark_sharding(t, mesh, (0, None)), RuntimeError, "use_spmd()")
import torch_xla.runtime as xr
xr.use_spmd()
for spec, words in [((0,), "has 1 entries, but the tensor has 2 dims"),
                    (("z", None), "Axis name z is not defined")]:
    expect_error(lambda: xs.mark_sharding(t, mesh, spec), ValueError, words)
expect_error(lambda: xs.Mesh(np.arange(2), (2,)), ValueError,
             "must match the global number of devices (4)")
try:
    xs.mark_sharding(torch.ones(4, 4), mesh, (0, None))
except TypeError as e:
    assert "tensor on the XLA device" in str(e), e
else:
    raise AssertionError("cpu tensor")
print("ok")
""", env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"}, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr


MULTIHOST = """
import numpy as np, torch, torch_xla, torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs
xr.use_spmd()
n = xr.global_runtime_device_count()
def model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))
torch.manual_seed(0)
batches = [(torch.randn(16, 16), torch.randn(16, 8)) for _ in range(3)]
dev = torch_xla.device()
net = model().to(dev)
mesh = xs.Mesh(np.arange(n), (2, n // 2), ("data", "model"))
xs.mark_sharding(net[0].weight, mesh, ("model", None))
if REORDERED:  # a second mesh whose order puts each host's devices on the other's tiles
    other = xs.Mesh(np.array([3, 1, 2, 0]), (n,), ("all",))
    xs.mark_sharding(net[2].weight, other, (None, "all"))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for x, y in batches:
    x, y = x.to(dev), y.to(dev)
    xs.mark_sharding(x, mesh, ("data", None))
    opt.zero_grad(); loss = torch.nn.functional.mse_loss(net(x), y); loss.backward(); opt.step()
    torch_xla.sync()
held = [tuple(s.data.shape) for s in xs.XLAShardedTensor(net[0].weight).local_shards]
# The master writes; every process reads the tiles (and runs the pending product).
import torch_xla.core.xla_model as xm
xm.save({"state": net.state_dict(), "pending": net[2].weight * 3}, SAVE)
import torch_xla.utils.serialization as xser
xser.save(net.state_dict(), SAVE + ".x")  # one tensor at a time
weights = [p.cpu().tolist() for p in net.parameters()]
summed = xm.do_on_ordinals(lambda w: w.sum().item(), (net[2].weight * 1,), (0,))
xs.clear_sharding(net[2].weight)  # laid out anew over both hosts' devices
print(json.dumps({"process": xr.process_index(), "processes": xr.process_count(),
                  "devices": n, "local": xr.addressable_runtime_device_count(), "held": held,
                  "loss": loss.item(), "weights": weights, "cleared": net[2].weight.tolist(),
                  "summed": summed}))
"""


@pytest.mark.parametrize("reordered", [False, True], ids=["one_mesh", "reordered_meshes"])
def test_two_hosts_form_one_mesh_and_train_as_one_host(reordered, tmp_path):
    """2 processes x 2 CPU devices (jax's distributed runtime over loopback, started with
    torchrun's variables) train as 1 process with 4 devices: same losses and weights. With
    `reordered`, a second mesh orders the devices [3, 1, 2, 0], so tiles of one program lie
    on meshes of two device orders across both hosts. `xm.save` by the master alone
    (reading tiles the other host holds, and a pending value) and a re-layout of a weight
    over both hosts work there too."""
    code = f"import json\nREORDERED = {reordered}\nSAVE = {str(tmp_path / 'one.pt')!r}\n"
    single = run_python(code + MULTIHOST, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"},
                        timeout=300)
    assert single.returncode == 0, single.stderr
    alone = json.loads(single.stdout.strip().splitlines()[-1])
    assert alone["cleared"] == alone["weights"][2]
    assert abs(alone["summed"] - np.sum(alone["weights"][2])) <= 1e-4
    outs = conftest.two_hosts(code.replace("one.pt", "two.pt") + MULTIHOST)
    hosts = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    assert [h["process"] for h in hosts] == [0, 1]
    for h in hosts:
        assert (h["processes"], h["devices"], h["local"]) == (2, 4, 2)
        assert h["held"] == [[16, 16], [16, 16]]  # 2 local devices, a (32, 16) weight / 2
        assert abs(h["loss"] - alone["loss"]) <= 1e-6
        for mine, theirs in zip(h["weights"], alone["weights"], strict=True):
            assert np.allclose(mine, theirs, atol=1e-6)
        assert h["cleared"] == h["weights"][2]
    # The callback ran on ordinal 0 only, reading tiles of both hosts.
    assert abs(hosts[0]["summed"] - alone["summed"]) <= 1e-5 and hosts[1]["summed"] is None
    saved = torch.load(tmp_path / "two.pt")
    for (name, tensor), theirs in zip(saved["state"].items(), alone["weights"], strict=True):
        assert tensor.device.type == "cpu" and np.allclose(tensor, theirs, atol=1e-6), name
    assert np.allclose(saved["pending"], np.array(alone["weights"][2]) * 3, atol=1e-5)
    saved = serialization.load(str(tmp_path / "two.pt.x"))
    for (name, tensor), theirs in zip(saved.items(), alone["weights"], strict=True):
        assert np.allclose(tensor, theirs, atol=1e-6), name


MINIBATCH = """
import json
import numpy as np, torch, torch_xla, torch_xla.runtime as xr
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.spmd as xs
xr.use_spmd()
n = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(n), (n,), ("data",))
dev = torch_xla.device()
torch.manual_seed(1)
net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8)).to(dev)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
torch.manual_seed(0)
full = [(torch.randn(16, 16), torch.randn(16, 8)) for _ in range(3)]
p, count = xr.process_index(), xr.process_count()
mine = slice(p * 16 // count, (p + 1) * 16 // count)  # this process's rows of each batch
part = [(x[mine], y[mine]) for x, y in full]
losses = []
spec = xs.ShardingSpec(mesh, ("data", None), minibatch=True)
for x, y in pl.MpDeviceLoader(part, dev, input_sharding=spec):
    assert tuple(x.shape) == (16, 16), x.shape  # the global batch
    opt.zero_grad(); loss = torch.nn.functional.mse_loss(net(x), y); loss.backward(); opt.step()
    xm.mark_step()
    losses.append(loss.item())
# dynamo on the same mesh
f = torch.compile(lambda a: (net(a) ** 2).sum(), backend="openxla")
xin = torch.randn(16, 16)
xd = xin.to(dev); xs.mark_sharding(xd, mesh, ("data", None))
dyn = f(xd).item()
eager = (net(xd) ** 2).sum().item()
# manual region
t = torch.arange(16.).to(dev); xs.mark_sharding(t, mesh, ("data",))
man = xs.enable_manual_sharding(t, ("data",), mesh=mesh).global_tensor
man = man * 2
back = xs.disable_manual_sharding(man, ("data",), (16,), mesh=mesh).global_tensor
# The processes are the replicas that meet.
met = [b.decode() for b in xm.rendezvous("hello", str(p).encode())]
reduced = xm.mesh_reduce("sum", float(p + 1), sum)
print(json.dumps({"p": p, "losses": losses, "dyn": dyn, "eager": eager,
                  "manual": back.cpu().tolist(), "met": met, "reduced": reduced}), flush=True)
"""


def test_two_hosts_load_their_own_part_of_each_batch_compile_and_meet_as_processes():
    """With `ShardingSpec(..., minibatch=True)` each of 2 processes loads only its half of
    every batch, which becomes one global batch of 16 sharded over both hosts' devices:
    training equals 1 process loading the whole batch. A `torch.compile(backend=
    'openxla')` call and a manual region on that mesh give the 1-process values too.
    `xm.rendezvous` and `xm.mesh_reduce` meet the processes (they returned this
    process's payload alone: SPMD has one replica per process)."""
    alone = json.loads(conftest.run_spmd(MINIBATCH).strip().splitlines()[-1])
    assert np.allclose(alone["dyn"], alone["eager"], rtol=1e-6)
    assert alone["manual"] == [2.0 * i for i in range(16)]
    assert alone["met"] == ["0"] and alone["reduced"] == 1.0
    hosts = [json.loads(out.strip().splitlines()[-1]) for out in conftest.two_hosts(MINIBATCH)]
    for process, host in enumerate(hosts):
        assert host["p"] == process
        assert np.allclose(host["losses"], alone["losses"], atol=1e-6), (host, alone)
        assert np.allclose(host["dyn"], alone["dyn"], rtol=1e-6)
        assert np.allclose(host["eager"], alone["eager"], rtol=1e-6)
        assert host["manual"] == alone["manual"]
        assert host["met"] == ["0", "1"] and host["reduced"] == 3.0


def test_reads_over_two_hosts_meet_only_for_tiles_held_elsewhere_and_a_lonely_one_errs(
        tmp_path):
    """Reading a tensor whose tiles lie on both hosts is a collective, and so is running a
    pending computation (one program over both hosts' devices). On 2 processes:
    - `xm.save` by the master: the other process joins only the reads of tensors whose
      tiles lie on both hosts (its share of what is read is just those bytes), not a
      full copy of what the master saves; tied tensors are read once on both;
    - a replicated value reads from a local device: one process may read it alone;
    - when only process 0 reads a sharded tensor, or a pending one, it gives up after
      TORCH_XLA_COLLECTIVE_TIMEOUT with an error naming the process that did not come
      and what to do, having launched nothing (it exits cleanly); the other is not held."""
    path = str(tmp_path / "saved.pt")
    outs = conftest.two_hosts(f"""
import json, numpy as np, torch, torch_xla, torch_xla.runtime as xr
import torch_xla.core.xla_model as xm, torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs
from torch_xla.pjrt.distributed import PeerTimeoutError
xr.use_spmd()
t = torch.arange(1024.).to("xla")
xs.mark_sharding(t, xs.Mesh(np.arange(4), (4,)), (0,))
ones = torch.ones(1024).to("xla")
def inbound():
    data = met.metric_data("InboundData")
    return 0 if data is None else data[1]
before = inbound()
xm.save({{"sharded": t, "ones": ones, "tied": t, "pending": t * 2}}, {path!r})
print("read:", int(inbound() - before))
total = t.sum()
torch_xla.sync()
if xr.process_index() == 0:
    print("alone:", total.item())  # replicated: read from a local device
    for read in (t.cpu, (t * 3).sum().item):
        try:
            read()
        except PeerTimeoutError as error:
            print("error:", error)
print("done")
""", env={"TORCH_XLA_COLLECTIVE_TIMEOUT": "5"})
    # (gloo, jax's CPU collectives, prints its connections to stdout too)
    first, second = ([line for line in out.splitlines()
                      if line.startswith(("read:", "alone:", "error:", "done"))]
                     for out in outs)
    # The master reads the sharded, the replicated and the pending tensor (4 KiB each);
    # the other process only the two whose tiles lie on both hosts.
    assert first[0] == "read: 12288" and second == ["read: 8192", "done"], (first, second)
    assert first[1] == "alone: 523776.0" and first[4] == "done", first
    sharded, pending = first[2], first[3]
    for error, words in [(sharded, "a read of a tensor sharded over several processes' "
                                   "devices"),
                         (pending, "a read of a pending tensor, whose computation is one "
                                   "program over every process's devices")]:
        for expected in ("error: Process 0 waited", words,
                         "process(es) [1] did not arrive within 5 s",
                         "outside `if xr.process_index() == 0:`"):
            assert expected in error, (expected, error)
    saved = torch.load(path)
    want = torch.arange(1024.)
    assert torch.equal(saved["sharded"], want) and torch.equal(saved["ones"], torch.ones(1024))
    assert torch.equal(saved["pending"], want * 2)
    assert saved["tied"].data_ptr() == saved["sharded"].data_ptr()  # one copy, as torch's


def test_experimental_xla_sharding_is_the_spmd_api_under_its_old_name():
    """PyTorch/XLA kept `torch_xla.experimental.xla_sharding` as an alias of the SPMD API
    (`import torch_xla.experimental.xla_sharding as xs`), warning on import."""
    import importlib

    import torch_xla.distributed.spmd as spmd

    sys.modules.pop("torch_xla.experimental.xla_sharding", None)
    with pytest.warns(DeprecationWarning, match="Please use `torch_xla.distributed.spmd`"):
        old = importlib.import_module("torch_xla.experimental.xla_sharding")
    names = ["Mesh", "HybridMesh", "ShardingSpec", "ShardingType", "XLAShard",
             "XLAShardedTensor", "MarkShardingFunction", "XLAPatchedLinear", "mark_sharding",
             "clear_sharding", "get_1d_mesh", "get_global_mesh", "set_global_mesh",
             "enable_manual_sharding", "disable_manual_sharding", "wrap_as_sharded_tensor",
             "unwrap_sharded_tensor", "wrap_if_sharded", "mark_sharding_with_gradients",
             "shard_as", "annotate_custom_sharding", "apply_backward_optimization_barrier",
             "xla_patched_nn_linear_forward"]
    assert [n for n in names if getattr(old, n, None) is not getattr(spmd, n)] == []


def test_the_virtual_device_keeps_a_moved_tensor_on_the_host_until_it_is_needed():
    """`t.to('xla')` in SPMD mode copies `t` on the host and uploads nothing: a later
    `mark_sharding` sends each device only its tiles (no whole copy of the weight on every
    device first, as PyTorch/XLA's virtual device), a program or a read uploads it whole.
    The copy is taken at the move: changing `t` afterwards changes nothing."""
    out = run_spmd("""
from torch_xla.lazy import functional
met.clear_all()
w = torch.randn(8, 16)
xw = w.to('xla')
info = torch_xla._XLAC._get_xla_tensor_debug_info(xw)
assert "Tensor on host: with size [8, 16]" in info and "XLAData: None" in info, info
assert "TransferToDeviceTime" not in met.metric_names()
expected = w.clone()
w.add_(1)  # the moved copy is the value at the move
mesh = xs.Mesh(np.arange(n), (1, n))
xs.mark_sharding(xw, mesh, (0, 1))
array = functional.unwrap(xw)._node.array
assert [s.data.shape for s in array.addressable_shards] == [(8, 16 // n)] * n
assert met.metric_data("OutboundData")[:2] == (1, 8 * 16 * 4)  # sent once, as tiles
assert met.counter_value("VirtualDeviceUsage") == 1
info = torch_xla._XLAC._get_xla_tensor_debug_info(xw)
assert "Tensor on host: None" in info and "IR: xla::device_data" in info, info
assert torch.equal(xw.cpu(), expected)

b = torch.randn(16)
xb = b.to('xla')
y = (xb * 2).sum()  # recorded over the host copy: uploaded whole when the sync runs it
assert "Tensor on host: with size [16]" in torch_xla._XLAC._get_xla_tensor_debug_info(xb)
torch.testing.assert_close(y.cpu(), (b * 2).sum())
info = torch_xla._XLAC._get_xla_tensor_debug_info(xb)
assert "Tensor on host: None" in info and "OpSharding: {replicated}" in info, info
xb.add_(1)
torch.testing.assert_close(xb.cpu(), b + 1)
print("ok")
""")
    assert "ok" in out


def test_an_hlo_graph_dump_ends_with_the_outputs_shardings(tmp_path):
    """XLA_SAVE_TENSORS_FMT=hlo in SPMD mode: after each graph, PyTorch/XLA's
    OUTPUT_SHARDING block gives each output's shape and the layout it came out with."""
    path = tmp_path / "graphs.txt"
    done = run_python(PRELUDE + """
mesh = xs.Mesh(np.arange(n), (1, n))
x = torch.randn(8, 32).to('xla')
xs.mark_sharding(x, mesh, (0, 1))
rows = x.sum(dim=1)  # summed over the sharded dim: replicated
y = x * 2  # laid out as x
torch_xla.sync()
""", env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4", "XLA_SAVE_TENSORS_FILE": str(path),
          "XLA_SAVE_TENSORS_FMT": "hlo"}, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    text = (tmp_path / "graphs.txt.0").read_text()
    block = text[text.index("## END_GRAPH"):]
    assert block.endswith("\n#OUTPUT_SHARDING_END\n\n"), block
    lines = block.split("#OUTPUT_SHARDING_BEGIN\n\n")[1].split("\n\n#OUTPUT_SHARDING_END")[0]
    assert sorted(lines.splitlines()) == ["f32[8,32] {devices=[1,4]0,1,2,3}",
                                          "f32[8] {replicated}"], lines
