"""`torch.xla`, the device module: RNG state like `torch.cuda`'s, fork_rng, seeding."""

from __future__ import annotations

import pytest
import torch

import torch_xla.core.xla_model as xm


def test_rng_state_is_a_cpu_byte_tensor(device):
    xm.set_rng_state(0x0102030405060708)
    state = torch.xla.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    assert state.tolist() == [8, 7, 6, 5, 4, 3, 2, 1]
    assert torch.equal(torch.get_device_module("xla").get_rng_state(device), state)


def test_set_rng_state_restores_the_stream(device):
    torch.manual_seed(3)
    state = torch.xla.get_rng_state()
    first = torch.rand(5, device=device).cpu()
    torch.xla.set_rng_state(state)
    assert torch.equal(torch.rand(5, device=device).cpu(), first)
    assert xm.get_rng_state() != 3  # drawing advanced it


def test_set_rng_state_rejects_other_tensors():
    with pytest.raises(ValueError, match="8 uint8 values.*got 3 torch.int64"):
        torch.xla.set_rng_state(torch.tensor([1, 2, 3]))


def test_fork_rng_restores_the_xla_stream(device):
    torch.manual_seed(11)
    with torch.random.fork_rng(device_type="xla"):
        inside = torch.rand(4, device=device).cpu()
        torch.xla.manual_seed(99)
        torch.rand(4, device=device).cpu()
    after = torch.rand(4, device=device).cpu()
    assert torch.equal(inside, after)


def test_fork_rng_restores_the_cpu_stream_too(device):
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    with torch.random.fork_rng(device_type="xla"):
        torch.rand(3)
    assert torch.equal(torch.rand(3), expected)


def test_dropout_under_frozen_rng_state(device):
    """OpInfo's `freeze_rng_state` saves and restores the accelerator's state this way."""
    from torch.testing._utils import freeze_rng_state

    x = torch.ones(64, device=device)
    with freeze_rng_state():
        torch.manual_seed(42)
        first = torch.nn.functional.dropout(x, 0.5).cpu()
    with freeze_rng_state():
        torch.manual_seed(42)
        second = torch.nn.functional.dropout(x, 0.5).cpu()
    assert torch.equal(first, second)
    assert set(first.unique().tolist()) <= {0.0, 2.0}


def test_torch_accelerator_synchronizes_the_xla_device_and_names_its_memory_figures(
        device, monkeypatch):
    """Device-agnostic code: torch's own `torch.accelerator.synchronize` fails for a
    backend written in Python, and its memory statistics hit an internal assert."""
    from torch_xla.backend import accelerator
    from torch_xla.lazy import graph

    assert torch.accelerator.current_accelerator().type == "xla"
    x = torch.randn(128, 128, device=device)
    y = x @ x
    xm.mark_step()
    assert graph._in_flight  # launched, maybe running
    torch.accelerator.synchronize()
    assert not graph._in_flight
    torch.accelerator.synchronize(device)
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-5, atol=1e-4)
    torch.accelerator.empty_cache()
    for name in accelerator.STATISTICS:
        for module in (torch.accelerator, torch.accelerator.memory):
            with pytest.raises(RuntimeError, match=f"{name}.*xla_model.get_memory_info"):
                getattr(module, name)()
    # Another accelerator keeps torch's functions (here: torch's refusal for this backend).
    monkeypatch.setattr(accelerator, "_on_xla", lambda: False)
    with pytest.raises(RuntimeError, match="doesn't support synchronizing"):
        torch.accelerator.synchronize()
