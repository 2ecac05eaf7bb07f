"""Laziness: ops record IR, syncs run one compiled graph, the cache is keyed by structure."""

from __future__ import annotations

import torch

import torch_xla
import torch_xla._XLAC
import torch_xla.core.xla_model as xm

from .helpers import assert_close


def _counts(met):
    return met.counter_value("UncachedCompile") or 0, met.counter_value("CachedCompile") or 0


def test_ops_do_not_execute_until_a_sync(device, metrics):
    x = torch.randn(4, 4).to(device)
    y = (x @ x).relu() + 1
    assert metrics.metric_data("ExecuteTime") is None
    torch_xla.sync()
    assert metrics.metric_data("ExecuteTime")[0] == 1
    assert _counts(metrics) == (1, 0)
    assert_close(y, (x.cpu() @ x.cpu()).relu() + 1)


def test_mark_step_runs_all_live_tensors_in_one_graph(device, metrics):
    x = torch.randn(8).to(device)
    a, b, c = x.sin(), x.cos() * 2, (x + 1).sum()
    xm.mark_step()
    assert metrics.metric_data("ExecuteTime")[0] == 1
    assert _counts(metrics) == (1, 0)
    cpu = x.cpu()
    assert_close(a, cpu.sin())
    assert_close(b, cpu.cos() * 2)
    assert_close(c, (cpu + 1).sum())


def test_same_structure_hits_the_cache_with_new_data(device, metrics):
    for i in range(3):
        x = torch.full((5,), float(i)).to(device)
        y = x * 3 - 1
        torch_xla.sync()
        assert_close(y, torch.full((5,), float(i)) * 3 - 1)
    assert _counts(metrics) == (1, 2)


def test_shape_change_recompiles_and_old_shape_hits(device, metrics):
    def step(n):
        y = torch.ones(n).to(device).exp().sum()
        torch_xla.sync()
        return y

    step(3)
    step(4)
    assert _counts(metrics) == (2, 0)
    assert_close(step(3), torch.ones(3).exp().sum())
    assert _counts(metrics) == (2, 1)


def test_aliased_inputs_are_not_confused_with_distinct_inputs(device, metrics):
    a = torch.tensor([1.0, 2.0]).to(device)
    b = torch.tensor([10.0, 20.0]).to(device)
    s1 = a + a
    torch_xla.sync()
    s2 = a + b
    torch_xla.sync()
    assert_close(s1, torch.tensor([2.0, 4.0]))
    assert_close(s2, torch.tensor([11.0, 22.0]))


def test_item_syncs_only_what_it_needs(device, metrics):
    x = torch.arange(4.0).to(device)
    total = x.sum()
    other = x * 2
    assert total.item() == 6.0
    assert other._is_view() is False
    torch_xla.sync()
    assert_close(other, torch.arange(4.0) * 2)


def test_create_and_destroy_counters(device, metrics):
    x = torch.randn(3).to(device)
    for _ in range(4):
        x = x + 1
    torch_xla.sync()
    created = metrics.counter_value("CreateXlaTensor")
    destroyed = metrics.counter_value("DestroyXlaTensor")
    assert created >= 5 and destroyed >= 3


def test_transfer_metrics(device, metrics):
    x = torch.randn(16).to(device)
    x.cpu()
    assert metrics.metric_data("TransferToDeviceTime")[0] >= 1
    assert metrics.metric_data("TransferFromDeviceTime")[0] >= 1
    report = torch_xla._XLAC._xla_metrics_report()
    assert "Metric: TransferToDeviceTime" in report and "TotalSamples" in report
    assert report == metrics.metrics_report()


def test_wait_device_ops(device):
    x = torch.randn(64, 64).to(device)
    y = x @ x
    xm.mark_step()
    xm.wait_device_ops()
    assert_close(y, x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-4)


def test_fallback_counts_aten_op(device, metrics):
    x = torch.tensor([0.0, 1.0, 0.0, 2.0]).to(device)
    nz = torch.nonzero(x)
    assert_close(nz, torch.nonzero(torch.tensor([0.0, 1.0, 0.0, 2.0])))
    assert metrics.counter_value("aten::nonzero") == 1
    assert "aten::nonzero" in metrics.short_metrics_report()
