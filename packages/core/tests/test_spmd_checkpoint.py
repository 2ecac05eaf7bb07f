"""Checkpoints of sharded state (`torch_xla.experimental.distributed_checkpoint`) through
`torch.distributed.checkpoint`: a model and its optimizer sharded on one mesh save and
reload onto another mesh, and into an unsharded CPU model; each tile is written once,
by the device that owns it; bad input names the key and the values.

Each case runs in a fresh interpreter with 4 CPU devices. Reference: the same values
trained in eager PyTorch on the CPU (tolerance 1e-5: sharded float32 sums are reduced in
another order); a reload must give the saved values exactly.
"""

from __future__ import annotations

import json

import conftest
import numpy as np

PRELUDE = """
import tempfile
import numpy as np, torch, torch_xla, torch_xla.runtime as xr
import torch.distributed.checkpoint as dcp
import torch_xla.distributed.spmd as xs
from torch_xla.experimental.distributed_checkpoint import SPMDLoadPlanner, SPMDSavePlanner
xr.use_spmd()
n = xr.global_runtime_device_count()
dev = torch_xla.device()

def save(state, path):
    dcp.save(state, storage_writer=dcp.FileSystemWriter(path), planner=SPMDSavePlanner(),
             no_dist=True)

def load(state, path, planner=None):
    dcp.load(state, storage_reader=dcp.FileSystemReader(path),
             planner=SPMDLoadPlanner() if planner is None else planner, no_dist=True)

def spec(t):
    return torch_xla._XLAC._get_xla_sharding_spec(t)
"""


def run_spmd(body: str) -> str:
    return conftest.run_spmd(PRELUDE + body)


def test_model_and_optimizer_reload_onto_another_mesh_and_into_cpu():
    out = run_spmd("""
def model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))

def step(net, opt, x, y):
    opt.zero_grad(); torch.nn.functional.mse_loss(net(x), y).backward(); opt.step()

torch.manual_seed(0)
batches = [(torch.randn(8, 16), torch.randn(8, 8)) for _ in range(3)]
ref = model()
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
for x, y in batches[:2]:
    step(ref, ref_opt, x, y)

# train 2 steps sharded on a (4, 1) mesh, then save model and optimizer
mesh = xs.Mesh(np.arange(n), (4, 1), ("data", "model"))
net = model().to(dev)
xs.mark_sharding(net[0].weight, mesh, ("data", None))
xs.mark_sharding(net[2].weight, mesh, (None, "data"))
xs.mark_sharding(net[0].bias, mesh, ("data",))
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
for x, y in batches[:2]:
    step(net, opt, x.to(dev), y.to(dev))
torch_xla.sync()
saved = {k: v.cpu() for k, v in net.state_dict().items()}
for (k, a), b in zip(saved.items(), ref.state_dict().values()):
    assert (a - b).abs().max() <= 1e-5, k
path = tempfile.mkdtemp()
save({"model": net.state_dict(), "optim": opt.state_dict(), "step": 2}, path)

# a new model sharded as `specs` says, and an SGD optimizer with momentum buffers
# sharded alike (its state to load into)
def fresh(mesh, specs):
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                              torch.nn.Linear(32, 8)).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.0, momentum=0.0)
    for name, p in net.named_parameters():
        buffer = opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
        if name in specs:
            xs.mark_sharding(p, mesh, specs[name])
            xs.mark_sharding(buffer, mesh, specs[name])
    return net, opt

# loaded in place into a fresh model and optimizer sharded on a (2, 2) mesh
mesh2 = xs.Mesh(np.arange(n), (2, 2), ("x", "y"))
net2, opt2 = fresh(mesh2, {"0.weight": ("x", "y"), "2.weight": ("y", None)})
w = net2[0].weight
state = {"model": net2.state_dict(), "optim": opt2.state_dict(), "step": 0}
load(state, path)
assert net2[0].weight is w
assert spec(net2[0].weight) == "{devices=[2,2]0,1,2,3}", spec(net2[0].weight)
assert spec(net2[2].weight) == "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}", spec(
    net2[2].weight)
for k, v in net2.state_dict().items():
    assert torch.equal(v.cpu(), saved[k]), k
for p, q in zip(net.parameters(), net2.parameters()):
    assert torch.equal(opt2.state[q]["momentum_buffer"].cpu(),
                       opt.state[p]["momentum_buffer"].cpu())
assert state["step"] == 2 and state["optim"]["param_groups"][0]["momentum"] == 0.9

# training goes on from state loaded onto a (1, 4) mesh as the reference does
mesh3 = xs.Mesh(np.arange(n), (1, 4), ("data", "model"))
net3, opt3 = fresh(mesh3, {"0.weight": ("model", None), "0.bias": ("model",)})
state = {"model": net3.state_dict(), "optim": opt3.state_dict()}
load(state, path)
opt3.load_state_dict(state["optim"])   # the hyperparameters (lr, momentum)
x, y = batches[2]
step(ref, ref_opt, x, y)
step(net3, opt3, x.to(dev), y.to(dev))
torch_xla.sync()
for (k, a), b in zip(net3.state_dict().items(), ref.state_dict().values()):
    assert (a.cpu() - b).abs().max() <= 1e-5, k

# into an unsharded CPU model, with torch's default planner
cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))
state = {"model": cpu.state_dict()}
dcp.load(state, storage_reader=dcp.FileSystemReader(path), no_dist=True)
for k, v in cpu.state_dict().items():
    assert torch.equal(v, saved[k]), k

# into an unsharded XLA model, with ours
plain = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                            torch.nn.Linear(32, 8)).to(dev)
load({"model": plain.state_dict()}, path, SPMDLoadPlanner(allow_partial_load=True))
for k, v in plain.state_dict().items():
    assert torch.equal(v.cpu(), saved[k]), k
print("ok")
""")
    assert "ok" in out, out


def test_each_tile_is_written_once_by_its_owner():
    out = run_spmd("""
mesh = xs.Mesh(np.arange(n), (2, 2), ("x", "y"))
values = {name: torch.randn(128, 64) for name in ("tiled", "partial", "replicated", "plain")}
state = {k: v.to(dev) for k, v in values.items()}
xs.mark_sharding(state["tiled"], mesh, ("x", "y"))
xs.mark_sharding(state["partial"], mesh, ("x", None))    # each row block on 2 devices
xs.mark_sharding(state["replicated"], mesh, (None, None))

planner = SPMDSavePlanner()
planner.set_up_planner(dict(state), is_coordinator=True)
items = planner.create_local_plan().items
per_key = {k: sorted(tuple(i.index.offset) for i in items if i.index.fqn == k) for k in state}
assert per_key["tiled"] == [(0, 0), (0, 32), (64, 0), (64, 32)], per_key
assert per_key["partial"] == [(0, 0), (64, 0)], per_key   # replicas skipped
assert per_key["replicated"] == [(0, 0)] and per_key["plain"] == [(0, 0)], per_key

path = tempfile.mkdtemp()
save(state, path)
md = dcp.FileSystemReader(path).read_metadata()
chunks = {k: sorted((tuple(c.offsets), tuple(c.sizes)) for c in m.chunks)
          for k, m in md.state_dict_metadata.items()}
assert chunks["tiled"] == [((0, 0), (64, 32)), ((0, 32), (64, 32)), ((64, 0), (64, 32)),
                           ((64, 32), (64, 32))], chunks
assert chunks["partial"] == [((0, 0), (64, 64)), ((64, 0), (64, 64))], chunks
assert chunks["replicated"] == [((0, 0), (128, 64))], chunks
stored = {}
for index, info in md.storage_data.items():
    stored.setdefault(index.fqn, []).append(info.length)
assert len(stored["tiled"]) == 4 and len(stored["partial"]) == 2, stored
# a stored tile holds its own elements (and torch.save's header), not the whole tensor's
whole = 128 * 64 * 4
assert max(stored["tiled"]) < whole // 2 < min(stored["replicated"]), stored

# and every value comes back, whatever the target's layout
fresh = {k: torch.zeros(128, 64).to(dev) for k in values}
xs.mark_sharding(fresh["tiled"], mesh, (None, "x"))
xs.mark_sharding(fresh["partial"], mesh, ("y", "x"))
xs.mark_sharding(fresh["plain"], mesh, ("x", None))
load(fresh, path)
for k, v in fresh.items():
    assert torch.equal(v.cpu(), values[k]), k
print("ok")
""")
    assert "ok" in out, out


def test_bad_input_names_the_key_and_the_values():
    out = run_spmd("""
from torch.distributed.checkpoint.api import CheckpointException
mesh = xs.Mesh(np.arange(n), (4,), ("x",))
w = torch.randn(8, 4).to(dev)
xs.mark_sharding(w, mesh, ("x", None))
path = tempfile.mkdtemp()
save({"w": w}, path)

def fails(state, *words):
    try:
        load(state, path)
    except CheckpointException as e:
        assert all(word in str(e) for word in words), str(e)
    else:
        raise AssertionError(f"no error for {list(state)}")

other = torch.zeros(8, 4).to(dev)
xs.mark_sharding(other, mesh, ("x", None))
fails({"w": other, "b": torch.zeros(3).to(dev)}, "'b'", "missing from the checkpoint",
      "allow_partial_load")
wide = torch.zeros(8, 8).to(dev)
xs.mark_sharding(wide, mesh, ("x", None))
fails({"w": wide}, "shape mismatch for 'w'", "(8, 4)", "(8, 8)")
print("ok")
""")
    assert "ok" in out, out


def test_checkpoint_manager_saves_restores_keeps_and_never_leaves_half_a_checkpoint():
    out = run_spmd("""
import os, signal
from torch.distributed.checkpoint.api import CheckpointException  # a BaseException
from torch_xla.experimental.distributed_checkpoint import CheckpointManager
mesh = xs.Mesh(np.arange(n), (4, 1), ("x", "y"))
mesh2 = xs.Mesh(np.arange(n), (2, 2), ("x", "y"))

def sharded(value, mesh, partition_spec):
    t = value.to(dev)
    xs.mark_sharding(t, mesh, partition_spec)
    return t

path = tempfile.mkdtemp()
mgr = CheckpointManager(path, save_interval=2, max_to_keep=2, chkpt_on_preemption=False)
values = {}
for step in range(7):
    values[step] = torch.full((8, 4), float(step)) + torch.arange(4.0)
    state = {"w": sharded(values[step], mesh, ("x", None)), "b": torch.tensor([step]),
             "note": f"step {step}"}
    took = mgr.save_async(step, state) if step % 4 else mgr.save(step, state)
    assert took == (step % 2 == 0), step
mgr.join()
assert mgr.all_steps() == [4, 6], mgr.all_steps()
assert sorted(os.listdir(path)) == ["4", "6"], os.listdir(path)
assert mgr.save(5, {"w": sharded(values[5], mesh, ("x", None))}, force=True)
assert mgr.all_steps() == [5, 6], mgr.all_steps()

# restore onto another mesh, in place
target = {"w": sharded(torch.zeros(8, 4), mesh2, ("y", "x")), "b": torch.tensor([-1]),
          "note": ""}
mgr.restore(6, target)
assert torch.equal(target["w"].cpu(), values[6]) and target["b"].item() == 6
assert target["note"] == "step 6", target
assert spec(target["w"]) == "{devices=[2,2]0,2,1,3}", spec(target["w"])
try:
    mgr.restore(3, target)
except ValueError as e:
    assert "no checkpoint of step 3" in str(e) and "[5, 6]" in str(e), e
else:
    raise AssertionError("restored an unknown step")

# a save that fails midway leaves the checkpoint of the same step whole
class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("cannot pickle this")

try:
    mgr.save(6, {"w": sharded(values[0], mesh, ("x", None)), "bad": Unpicklable()},
             force=True)
except CheckpointException as e:
    assert "cannot pickle this" in str(e), e
else:
    raise AssertionError("the bad save went through")
again = CheckpointManager(path, save_interval=2, chkpt_on_preemption=False)
assert again.all_steps() == [5, 6], again.all_steps()
target = {"w": sharded(torch.zeros(8, 4), mesh, ("x", None))}
again.restore(6, target)
assert torch.equal(target["w"].cpu(), values[6])

# a background save that fails says so in join()
again.save_async(8, {"bad": Unpicklable()})
try:
    again.join()
except CheckpointException as e:
    assert "cannot pickle this" in str(e), e
else:
    raise AssertionError("join() hid the failed save")
assert again.all_steps() == [5, 6], again.all_steps()

# a SIGTERM makes the next step a checkpoint step, once
watch = CheckpointManager(path, save_interval=100)
assert not watch.should_save(1)
os.kill(os.getpid(), signal.SIGTERM)
assert watch.should_save(3) and not watch.should_save(5)
print("ok")
""")
    assert "ok" in out, out


def test_prime_optimizer_creates_state_laid_out_as_the_parameters():
    out = run_spmd("""
from torch_xla.experimental.distributed_checkpoint import prime_optimizer
mesh = xs.Mesh(np.arange(n), (4, 1), ("x", "y"))
net = torch.nn.Linear(8, 4).to(dev)
xs.mark_sharding(net.weight, mesh, ("x", None))
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
before = net.weight.cpu()
assert not opt.state_dict()["state"]
assert prime_optimizer(opt) is opt
state = opt.state_dict()["state"]
assert sorted(state) == [0, 1], state
buf = state[0]["momentum_buffer"]
assert torch.equal(buf.cpu(), torch.zeros(4, 8)) and torch.equal(net.weight.cpu(), before)
assert spec(buf) == spec(net.weight) == "{devices=[4,1]0,1,2,3}", (spec(buf), spec(net.weight))
print("ok")
""")
    assert "ok" in out, out


def test_sharded_cpu_state_dict_stages_sharded_tensors_as_cpu_shards():
    out = run_spmd("""
from torch_xla.experimental.distributed_checkpoint._helpers import (
    _CpuShards, _is_sharded_tensor, _sharded_cpu_state_dict)
mesh = xs.Mesh(np.arange(n), (4, 1), ("x", "y"))
w, r = torch.randn(8, 4), torch.randn(3)
state = {"model": {"w": w.to(dev), "r": r.to(dev)}, "step": 3}
xs.mark_sharding(state["model"]["w"], mesh, ("x", None))
xs.mark_sharding(state["model"]["r"], mesh, (None,))
assert _is_sharded_tensor(xs.wrap_if_sharded(state["model"]["w"]))
assert not _is_sharded_tensor(xs.wrap_if_sharded(state["model"]["r"]))
assert not _is_sharded_tensor(state["model"]["w"])   # not an XLAShardedTensor
staged = _sharded_cpu_state_dict(state)
assert isinstance(staged["model"]["w"], _CpuShards), staged
assert staged["model"]["r"].device.type == "cpu" and torch.equal(staged["model"]["r"], r)
assert staged["step"] == 3

# the save planner flattens around _CpuShards and writes them as the tensors
planner = SPMDSavePlanner()
planner.set_up_planner(staged, is_coordinator=True)
assert list(planner.sharded_state_dict) == ["model.w"], planner.sharded_state_dict
assert sorted(planner.unsharded_state_dict) == ["model.r", "step"]
path = tempfile.mkdtemp()
save(staged, path)
target = {"model": {"w": torch.zeros(8, 4).to(dev), "r": torch.zeros(3).to(dev)}, "step": 0}
xs.mark_sharding(target["model"]["w"], mesh, (None, "x"))
load(target, path)
assert torch.equal(target["model"]["w"].cpu(), w) and torch.equal(target["model"]["r"].cpu(), r)
assert target["step"] == 3
print("ok")
""")
    assert "ok" in out, out


def test_write_items_give_the_tiles_position_among_the_local_shards():
    out = run_spmd("""
mesh = xs.Mesh(np.arange(n), (2, 2), ("x", "y"))
t = torch.randn(8, 6).to(dev)
xs.mark_sharding(t, mesh, ("x", None))    # rows split in 2, each block on 2 devices
planner = SPMDSavePlanner()
planner.set_up_planner({"t": t}, is_coordinator=True)
items = [i for i in planner.create_local_plan().items if i.index.fqn == "t"]
shards = xs.wrap_if_sharded(t).local_shards
assert sorted(i.index.index for i in items) == [0, 2], [i.index for i in items]
for item in items:
    shard = shards[item.index.index]
    assert shard.replica_id == 0 and tuple(item.index.offset) == (shard.indices[0].start, 0)
    assert torch.equal(planner.resolve_data(item), shard.data)
print("ok")
""")
    assert "ok" in out, out


def test_preemption_sync_point_and_coordinator_entry_points():
    out = run_spmd("""
import os, signal, time
from torch_xla import _XLAC
_XLAC._ensure_xla_coordinator_initialized(global_rank=0, world_size=1,
                                          master_addr="localhost")
try:
    _XLAC._ensure_xla_coordinator_initialized(global_rank=1, world_size=1,
                                              master_addr="localhost")
except Exception as e:
    assert "rank 1" in str(e) and "0..0" in str(e), e
else:
    raise AssertionError("a rank outside the world was accepted")
try:
    _XLAC._sync_point_reached(0)
except RuntimeError as e:
    assert "_activate_preemption_sync_manager" in str(e), e
else:
    raise AssertionError("asked before activation")

seen = []
signal.signal(signal.SIGTERM, lambda *_: seen.append("before"))
previous = signal.getsignal(signal.SIGTERM)
_XLAC._activate_preemption_sync_manager()
try:
    assert not any(_XLAC._sync_point_reached(step) for step in range(5))
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.1)
    assert _XLAC._sync_point_reached(5) and not _XLAC._sync_point_reached(6)
    assert seen == ["before"], seen
finally:
    _XLAC._deactivate_preemption_sync_manager()
assert signal.getsignal(signal.SIGTERM) is previous
print("ok")
""")
    assert "ok" in out, out


def test_load_keeps_the_replicated_layout_of_an_unsharded_tensor():
    out = run_spmd("""
mesh = xs.Mesh(np.arange(n), (4,), ("x",))
b = torch.randn(6)
path = tempfile.mkdtemp()
save({"b": b.to(dev)}, path)
w = torch.zeros(4, 6).to(dev)
xs.mark_sharding(w, mesh, ("x", None))
target = w.sum(0)   # computed from sharded data: laid out replicated, not marked by hand
torch_xla.sync()
assert spec(target) == "{replicated}", spec(target)
load({"b": target}, path)
assert torch.equal(target.cpu(), b) and spec(target) == "{replicated}", spec(target)
print("ok")
""")
    assert "ok" in out, out


TWO_HOSTS_FSDP = """
import json, os, sys
import numpy as np, torch, torch_xla, torch_xla.runtime as xr
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.spmd as xs
import torch_xla.distributed.xla_backend  # registers xla://
from torch_xla.experimental.distributed_checkpoint import (
    CheckpointManager, SPMDLoadPlanner, SPMDSavePlanner)
from torch_xla.experimental.spmd_fully_sharded_data_parallel import (
    SpmdFullyShardedDataParallel as FSDPv2)
PATH = sys.argv[1]
xr.use_spmd()
n = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(n), (n, 1), ("fsdp", "model"))
xs.set_global_mesh(mesh)
dev = torch_xla.device()
def mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
model = FSDPv2(mlp(1).to(dev))
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
torch.manual_seed(0)
data = [(torch.randn(16, 16), torch.randn(16, 8)) for _ in range(3)]
losses = []
for x, y in pl.MpDeviceLoader(data, dev, input_sharding=xs.ShardingSpec(mesh, ("fsdp", None))):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    xm.optimizer_step(opt)
    losses.append(loss.item())
errors = []
if xr.process_count() > 1:  # no process group yet: refused, nothing written
    for attempt in (lambda: dcp.save({"model": model.state_dict()},
                                     storage_writer=dcp.FileSystemWriter(PATH + "/none"),
                                     planner=SPMDSavePlanner()),
                    lambda: CheckpointManager(PATH + "/none_mgr", 1)):
        try:
            attempt()
        except BaseException as error:  # dcp's CheckpointException is a BaseException
            errors.append(str(error))
dist.init_process_group("gloo", init_method="xla://")
dcp.save({"model": model.module.state_dict()}, storage_writer=dcp.FileSystemWriter(PATH + "/ck"),
         planner=SPMDSavePlanner())
# Reload onto another mesh: the devices in another order, the weights sharded on columns.
other = xs.Mesh(np.array([3, 1, 2, 0]), (n,), ("all",))
fresh = mlp(5).to(dev)
for layer in (fresh[0], fresh[2]):
    xs.mark_sharding(layer.weight, other, (None, "all"))
state = {"model": fresh.state_dict()}
dcp.load(state, storage_reader=dcp.FileSystemReader(PATH + "/ck"), planner=SPMDLoadPlanner())
fresh.load_state_dict(state["model"])
manager = CheckpointManager(PATH + "/mgr", save_interval=1)
assert manager.save(3, {"model": model.module.state_dict()})
restored = {"model": mlp(7).to(dev).state_dict()}
manager.restore(3, restored)
print(json.dumps({
    "rank": [dist.get_rank(), dist.get_world_size(), xr.process_index()], "losses": losses,
    "errors": errors, "trained": [p.cpu().tolist() for p in model.parameters()],
    "reloaded": [p.cpu().tolist() for p in fresh.parameters()],
    "restored": [t.cpu().tolist() for t in restored["model"].values()],
    "held": [tuple(s.data.shape) for s in xs.XLAShardedTensor(fresh[0].weight).local_shards],
    "none": os.path.exists(PATH + "/none/.metadata")}))
"""


def test_two_hosts_train_fsdpv2_and_checkpoint_over_their_process_group(tmp_path):
    """2 processes x 2 CPU devices train an FSDPv2 MLP from a loader that shards each
    batch, as 1 process with 4 devices does (same losses); with the `xla://` process
    group (one rank per process in SPMD mode) `torch.distributed.checkpoint` saves the
    sharded weights and reloads them onto another mesh, and `CheckpointManager` saves and
    restores. Without a process group both refuse to checkpoint, naming the fix (each
    process would write the checkpoint as if alone, over the other's files)."""
    code = TWO_HOSTS_FSDP.replace("PATH = sys.argv[1]", f"PATH = {str(tmp_path / 'one')!r}")
    alone = json.loads(conftest.run_spmd(code).strip().splitlines()[-1])
    assert alone["rank"] == [0, 1, 0] and alone["errors"] == []
    code = TWO_HOSTS_FSDP.replace("PATH = sys.argv[1]", f"PATH = {str(tmp_path / 'two')!r}")
    hosts = [json.loads(out.strip().splitlines()[-1]) for out in conftest.two_hosts(code)]
    for process, host in enumerate(hosts):
        assert host["rank"] == [process, 2, process]
        assert np.allclose(host["losses"], alone["losses"], atol=1e-6), (host, alone)
        for mine, theirs in zip(host["trained"], alone["trained"], strict=True):
            assert np.allclose(mine, theirs, atol=1e-6)
        # A reload gives the saved values exactly, on the other mesh too.
        assert host["reloaded"] == host["trained"] and host["restored"] == host["trained"]
        assert host["held"] == [[64, 4], [64, 4]]  # (64, 16) over 4 devices, by columns
        assert len(host["errors"]) == 2 and not host["none"]
        for error, what in zip(host["errors"], ("SPMDSavePlanner", "CheckpointManager"),
                               strict=True):
            for words in (f"{what}: this job runs 2 processes, but torch.distributed has no "
                          "process group", "init_method='xla://'"):
                assert words in error, (words, error)
