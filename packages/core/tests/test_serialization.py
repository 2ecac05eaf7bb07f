"""xm.save and torch_xla.utils.serialization: CPU copies, atomic writes, streamed tensors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_xla.core.xla_model as xm
import torch_xla.utils.serialization as xser


@pytest.fixture
def device():
    return xm.xla_device()


def state(device) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to(device)
    return {"model": model.state_dict(), "step": 7, "names": ["a", "b"]}


def assert_same_on_cpu(loaded, original) -> None:
    assert loaded["step"] == 7 and loaded["names"] == ["a", "b"]
    for key, tensor in original["model"].items():
        assert loaded["model"][key].device.type == "cpu"
        torch.testing.assert_close(loaded["model"][key], tensor.cpu(), rtol=0, atol=0)


def test_xm_save_writes_cpu_tensors_loadable_anywhere(tmp_path, device):
    data = state(device)
    path = tmp_path / "ckpt.pt"
    xm.save(data, str(path))
    assert_same_on_cpu(torch.load(path, weights_only=False), data)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temporary file left


def test_xm_save_to_a_file_object(tmp_path, device):
    data = state(device)
    with open(tmp_path / "ckpt.pt", "wb") as f:
        xm.save(data, f)
    assert_same_on_cpu(torch.load(tmp_path / "ckpt.pt", weights_only=False), data)


def test_serialization_round_trip_and_replacement(tmp_path, device):
    data = state(device)
    path = str(tmp_path / "ckpt")
    xser.save(data, path)
    xser.save(data, path)  # the second save replaces the first, leaving one tensor folder
    assert_same_on_cpu(xser.load(path), data)
    folders = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(folders) == 1 and len(list(folders[0].iterdir())) == len(data["model"])


def test_serialization_load_refuses_a_plain_torch_file(tmp_path):
    torch.save({"x": torch.ones(1)}, tmp_path / "plain.pt")
    with pytest.raises(ValueError, match="not written by torch_xla.utils.serialization.save"):
        xser.load(str(tmp_path / "plain.pt"))


KILLED_WRITER = """
import os, sys, time, torch
import torch_xla.core.xla_model as xm
import torch_xla.utils.serialization as xser

original = torch.save
def slow_save(obj, f, *args, **kwargs):
    original(obj, f, *args, **kwargs)
    if hasattr(f, "flush"):
        f.flush()
    print("writing", flush=True)
    time.sleep(60)  # killed here, mid-write
torch.save = slow_save
data = {{"w": torch.full((1000,), 2.0, device=xm.xla_device())}}
{call}
"""


@pytest.mark.parametrize("call", ["xm.save(data, sys.argv[1])", "xser.save(data, sys.argv[1])"])
def test_a_killed_save_leaves_the_previous_checkpoint_intact(tmp_path, device, call):
    path = str(tmp_path / "ckpt")
    old = {"w": torch.ones(1000, device=device)}
    save, load = (xm.save, torch.load) if call.startswith("xm") else (xser.save, xser.load)
    save(old, path)
    writer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(KILLED_WRITER.format(call=call)), path],
        stdout=subprocess.PIPE, text=True,
    )
    assert writer.stdout.readline().strip() == "writing"
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=30)
    loaded = load(path) if load is xser.load else load(path, weights_only=False)
    torch.testing.assert_close(loaded["w"], torch.ones(1000), rtol=0, atol=0)
    # the old checkpoint is still whole, and the next save still works
    save({"w": torch.zeros(3, device=device)}, path)
    loaded = load(path) if load is xser.load else load(path, weights_only=False)
    torch.testing.assert_close(loaded["w"], torch.zeros(3), rtol=0, atol=0)


def test_serialization_computes_pending_tensors_in_one_graph(tmp_path, device):
    import torch_xla.debug.metrics as met

    x = torch.arange(6.0, device=device)
    xm.mark_step()
    data = {"a": x * 2, "b": [x + 1, x.sum()], "c": torch.nn.Parameter(x - 3)}
    met.clear_all()
    xser.save(data, str(tmp_path / "ckpt"))
    graphs = (met.counter_value("UncachedCompile") or 0) + (met.counter_value("CachedCompile") or 0)
    assert graphs == 1
    loaded = xser.load(str(tmp_path / "ckpt"))
    torch.testing.assert_close(loaded["b"][1], torch.tensor(15.0))
    torch.testing.assert_close(loaded["c"], torch.arange(6.0) - 3)


PEAK_DURING_SAVE = """
import ctypes, gc, sys, torch
import torch_xla.core.xla_model as xm
import torch_xla.utils.serialization as xser

def rss(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024

device = xm.xla_device()
state = {}
for i in range(6):  # six 16 MB tensors
    state[f"w{i}"] = torch.full((4 * 2**20,), float(i)).to(device)
xm.mark_step()
xm.wait_device_ops()
gc.collect()
ctypes.CDLL("libc.so.6").malloc_trim(0)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # restart the high-water mark from here
before = rss("VmRSS")
(xser.save if sys.argv[2] == "xser" else xm.save)(state, sys.argv[1])
print(rss("VmHWM") - before)
"""


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux >= 4.0")
def test_serialization_holds_one_tensor_on_the_host_at_a_time(tmp_path):
    """The save's own peak of resident memory: about one tensor (16 MB), not the model (96 MB)."""

    # Every allocation of 1 MB or more gets its own mapping, returned on free: glibc would
    # otherwise serve some from its heap, whose layout can leave a freed copy unreusable.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(2**20)}

    def peak(method: str) -> float:
        out = subprocess.run(
            [sys.executable, "-c", PEAK_DURING_SAVE, str(tmp_path / method), method],
            capture_output=True, text=True, check=True, timeout=240, env=env,
        ).stdout
        return float(out.strip().splitlines()[-1])

    assert peak("xser") < 16 * 1.5
    assert peak("xm") > 96 * 0.9  # xm.save holds every CPU copy at once
