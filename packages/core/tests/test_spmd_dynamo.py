"""`torch.compile(backend='openxla')` in SPMD mode (`torch_xla._dynamo.dynamo_bridge`):
a compiled function called with inputs laid out in several ways gives the CPU's results,
compiling once per layout, and its results report the layout the partitioner gave them,
as a sync's results do.

Each case runs in a fresh interpreter over 4 CPU devices. Numerics reference: the same
functions in eager PyTorch on the CPU; tolerance 1e-5 (float32 sums over sharded dims
are reduced in another order).
"""

from __future__ import annotations

import json

from conftest import run_spmd

PRELUDE = """
import json
import numpy as np, torch, torch_xla, torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs
import torch_xla.debug.metrics as met
xr.use_spmd()
dev = torch_xla.device()
mesh = xs.Mesh(np.arange(4), (2, 2), ("data", "model"))
spec = torch_xla._XLAC._get_xla_sharding_spec

def compiles():
    return met.counter_value("UncachedCompile") or 0
"""


def run(body: str) -> dict:
    return json.loads(run_spmd(PRELUDE + body).strip().splitlines()[-1])


def test_a_new_input_layout_compiles_anew_and_matches_the_cpu():
    out = run("""
torch.manual_seed(0)
w_cpu = torch.randn(16, 8)
xs_cpu = [torch.randn(8, 16) for _ in range(4)]

def f(x, w):
    return torch.tanh(x @ w) * 2 + x.sum()

compiled = torch.compile(f, backend="openxla")
w = w_cpu.to(dev)
xs.mark_sharding(w, mesh, (None, "model"))
layouts = [None, ("data", None), (None, "model"), ("data", None)]
errors, counts = [], []
for x_cpu, layout in zip(xs_cpu, layouts):
    x = x_cpu.to(dev)
    if layout is not None:
        xs.mark_sharding(x, mesh, layout)
    torch_xla.sync()
    before = compiles()
    got = compiled(x, w)
    torch_xla.sync()
    counts.append(compiles() - before)
    errors.append(float((got.cpu() - f(x_cpu, w_cpu)).abs().max()))
print(json.dumps({"errors": errors, "counts": counts}))
""")
    assert max(out["errors"]) < 1e-5, out
    # replicated, rows, columns: a program each; rows again: the program compiled before
    assert out["counts"] == [1, 1, 1, 0], out


def test_the_same_layout_every_call_compiles_once():
    out = run("""
def f(x, w):
    return (x @ w).relu()

compiled = torch.compile(f, backend="openxla")
w = torch.randn(16, 8).to(dev)
xs.mark_sharding(w, mesh, ("model", None))
counts = []
for seed in range(4):
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(seed)).to(dev)
    xs.mark_sharding(x, mesh, ("data", None))
    torch_xla.sync()
    before = compiles()
    compiled(x, w)
    torch_xla.sync()
    counts.append(compiles() - before)
print(json.dumps({"counts": counts}))
""")
    assert out["counts"] == [1, 0, 0, 0], out


def test_results_report_the_layout_a_sync_gives_them():
    out = run("""
def f(x, w):
    return torch.relu(x @ w), x + 1

torch.manual_seed(0)
x_cpu, w_cpu = torch.randn(8, 16), torch.randn(16, 8)
x, w = x_cpu.to(dev), w_cpu.to(dev)
xs.mark_sharding(x, mesh, ("data", None))
xs.mark_sharding(w, mesh, (None, "model"))
torch_xla.sync()
lazy = f(x, w)
torch_xla.sync()
compiled = torch.compile(f, backend="openxla")(x, w)
print(json.dumps({
    "synced": [spec(t) for t in lazy],
    "compiled": [spec(t) for t in compiled],
    "error": max(float((c.cpu() - e).abs().max()) for c, e in zip(compiled, f(x_cpu, w_cpu))),
}))
""")
    assert out["compiled"] == out["synced"], out
    assert all(out["compiled"]), out  # each names its layout, not ''
    assert out["error"] < 1e-5, out


def test_training_step_with_sharded_parameters_matches_the_cpu():
    """Forward and backward through AOTAutograd: the parameters sharded, the batches
    loaded in two layouts."""
    out = run("""
def model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))

def step(net, x, y):
    loss = torch.nn.functional.mse_loss(net(x), y)
    loss.backward()
    return loss

torch.manual_seed(0)
batches = [(torch.randn(8, 16), torch.randn(8, 4)) for _ in range(3)]
ref, net = model(), model().to(dev)
xs.mark_sharding(net[0].weight, mesh, ("model", None))
xs.mark_sharding(net[2].weight, mesh, (None, "model"))
compiled = torch.compile(step, backend="openxla")
errors = []
for k, (x, y) in enumerate(batches):
    ref.zero_grad(); net.zero_grad()
    want = step(ref, x, y)
    xx, yy = x.to(dev), y.to(dev)
    if k % 2:
        xs.mark_sharding(xx, mesh, ("data", None))
    got = compiled(net, xx, yy)
    torch_xla.sync()
    errors.append(float((got.detach().cpu() - want.detach()).abs()))
    for p, q in zip(net.parameters(), ref.parameters()):
        errors.append(float((p.grad.cpu() - q.grad).abs().max()))
print(json.dumps({"errors": errors}))
""")
    assert max(out["errors"]) < 1e-5, out
