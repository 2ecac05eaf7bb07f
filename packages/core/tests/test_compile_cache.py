"""xr.initialize_cache with the engine: a second process compiles nothing."""

from __future__ import annotations

import json

from conftest import run_python

TRAIN = """
import json, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
import torch_xla.runtime as xr

xr.initialize_cache(sys.argv[1] if len(sys.argv) > 1 else {path!r})
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

device = xm.xla_device()
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                      nn.Flatten(), nn.Linear(4 * 8 * 8, 10)).to(device)
optimizer = torch.optim.Adam(model.parameters())
x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
losses = []
for _ in range(3):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x.to(device)), y.to(device))
    loss.backward()
    optimizer.step()
    xm.mark_step()
    losses.append(loss.item())
compiles = met.metric_data("CompileTime")
print(json.dumps({{
    "graphs": met.counter_value("UncachedCompile"),
    "disk_hits": met.counter_value("PersistentCacheHit") or 0,
    "compiles": compiles[0] if compiles else 0,
    "losses": losses,
}}))
"""


def train(path) -> dict:
    result = run_python(TRAIN.format(path=str(path)), {"PJRT_DEVICE": "CPU"}, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_second_process_loads_every_graph_from_the_cache(tmp_path):
    first = train(tmp_path / "cache")
    assert first["graphs"] >= 1 and first["compiles"] == first["graphs"]
    assert first["disk_hits"] == 0
    second = train(tmp_path / "cache")
    assert second["compiles"] == 0  # nothing compiled...
    assert second["disk_hits"] == first["graphs"]  # ...every graph came from disk
    assert second["losses"] == first["losses"]  # and computes the same


def test_corrupt_entries_are_recompiled_with_a_warning(tmp_path):
    first = train(tmp_path / "cache")
    for entry in (tmp_path / "cache").iterdir():
        entry.write_bytes(b"\0garbage")
    result = run_python(TRAIN.format(path=str(tmp_path / "cache")), {"PJRT_DEVICE": "CPU"},
                        timeout=300)
    assert result.returncode == 0, result.stderr
    again = json.loads(result.stdout.strip().splitlines()[-1])
    assert again["compiles"] == first["graphs"] and again["losses"] == first["losses"]
    assert "ignoring unreadable compilation cache entry" in result.stderr
