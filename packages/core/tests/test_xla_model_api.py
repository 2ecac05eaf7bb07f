"""The training-loop part of xm, against eager PyTorch where numbers are involved."""

from __future__ import annotations

import io
import time
import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


@pytest.fixture
def device():
    return xm.xla_device()


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def test_device_helpers(device):
    assert device == torch.device("xla", 0) == torch_xla.device()
    assert xm.xla_device_hw(device) == xr.device_type() == "CPU"
    assert xm.get_xla_supported_devices() == ["xla:0"]
    assert xm.get_xla_supported_devices(devkind="NOPE") == []
    with pytest.raises(ValueError, match="cpu is not an XLA device"):
        xm.xla_device_hw("cpu")


def test_optimizer_step_matches_eager_and_returns_the_closure_loss(device):
    eager, lazy = small_model(), small_model().to(device)
    x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
    e_opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    l_opt = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        e_opt.zero_grad()
        F.cross_entropy(eager(x), y).backward()
        e_opt.step()

        def closure():
            l_opt.zero_grad()
            loss = F.cross_entropy(lazy(x.to(device)), y.to(device))
            loss.backward()
            return loss

        loss = xm.optimizer_step(l_opt, barrier=True, optimizer_args={"closure": closure})
        assert loss.device == device
    for e, v in zip(eager.parameters(), lazy.parameters(), strict=True):
        torch.testing.assert_close(v.cpu(), e, rtol=1e-5, atol=1e-6)


def test_step_closures_run_after_the_step_in_order(device):
    seen = []
    t = torch.ones(3, device=device) * 2
    xm.add_step_closure(lambda v: seen.append(("sync", v.cpu().tolist())), args=(t,))
    xm.add_step_closure(lambda: seen.append(("async", 1)), run_async=True)
    assert seen == []  # nothing runs before the step
    xm.mark_step()
    xm.wait_device_ops()
    assert seen == [("sync", [2.0, 2.0, 2.0]), ("async", 1)]
    xm.mark_step()
    xm.wait_device_ops()
    assert len(seen) == 2  # closures run once


def test_master_helpers_on_one_process(device, capsys):
    assert xm.is_master_ordinal() and xm.is_master_ordinal(local=False)
    xm.master_print("hello", 3)
    assert capsys.readouterr().out == "hello 3\n"
    assert xm.rendezvous("tag", b"payload") == [b"payload"]


@pytest.mark.parametrize(
    "name, replacement, value",
    [("xrt_world_size", "world_size", 1), ("get_ordinal", "global_ordinal", 0),
     ("get_local_ordinal", "local_ordinal", 0)],
)
def test_deprecated_aliases_warn_and_answer(device, name, replacement, value):
    with pytest.warns(DeprecationWarning, match=f"torch_xla.runtime.{replacement}"):
        assert getattr(xm, name)() == value


def test_rate_tracker_measures_items_per_second():
    tracker = xm.RateTracker(smooth_factor=0.0)
    tracker.add(100)
    time.sleep(0.2)
    rate = tracker.rate()
    assert 250 < rate < 550  # 100 items in ~0.2 s
    tracker.add(50)
    time.sleep(0.1)
    assert 250 < tracker.rate() < 550
    assert 300 < tracker.global_rate() * 0.3 / 0.3 < 550


def test_save_to_buffer_holds_cpu_tensors(device):
    buffer = io.BytesIO()
    xm.save({"w": torch.arange(4.0, device=device)}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["w"].device.type == "cpu"
    assert loaded["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_warnings_are_not_raised_by_plain_calls(device):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        xm.is_master_ordinal()
        xm.get_xla_supported_devices()
