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
