"""`torch_xla.debug.metrics`: the store's API and PyTorch/XLA's report format.

The expected texts come from PyTorch/XLA's metrics printer (`metrics.cc`): durations
as `[dd d][hh h][mm m][ss s][mmm ms]uuu.uuuus`, sizes in powers of 1024 with two
decimals, other numbers with two decimals.
"""

from __future__ import annotations

import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met
import torch_xla.debug.metrics_compare_utils as mcu
from torch_xla import _metrics


@pytest.fixture(autouse=True)
def empty_metrics():
    met.clear_all()
    yield
    met.clear_all()


@pytest.mark.parametrize(
    "seconds, text",
    [
        (369.401746001, "06m09s401ms746.001us"),
        (0.001032778, "001ms032.778us"),
        (21.102853173, "21s102ms853.173us"),
        (0.000005, "005.000us"),
        (0.000123456, "123.456us"),
        (0.0, "000.000us"),
        (407467.495546299, "04d17h11m07s495ms546.299us"),
        (3600.0, "01h00m00s000ms000.000us"),
    ],
)
def test_durations_print_as_pytorch_xla_prints_them(seconds, text):
    assert _metrics.format_duration(seconds) == text


@pytest.mark.parametrize(
    "size, text",
    [(0, "0.00B"), (1000, "1000.00B"), (1024, "1.00KB"), (1.54 * 2**20, "1.54MB"),
     (64.75 * 2**40, "64.75TB"), (3 * 2**60, "3072.00PB")],
)
def test_sizes_print_in_powers_of_1024(size, text):
    assert _metrics.format_bytes(size) == text


def test_units_follow_the_metric_name():
    assert _metrics.metric("InboundData").unit == _metrics.BYTES
    assert _metrics.metric("OutboundData").unit == _metrics.BYTES
    assert _metrics.metric("TensorsGraphSize").unit == _metrics.NUMBER
    assert _metrics.metric("CompileTime").unit == _metrics.TIME


def test_counters_report_value_and_names():
    _metrics.counter("CachedCompile").inc()
    _metrics.counter("CachedCompile").inc(2)
    _metrics.increment_counter("aten::nonzero")
    assert met.counter_value("CachedCompile") == 3
    assert met.counter_value("Missing") is None
    assert met.counter_names() == ["CachedCompile", "aten::nonzero"]
    assert "Counter: CachedCompile\n  Value: 3\n" in met.metrics_report()


def test_a_zero_counter_is_absent():
    _metrics.counter("MarkStep")
    assert met.counter_value("MarkStep") is None
    assert met.counter_names() == []
    assert met.metrics_report() == ""


def test_time_metric_data_is_in_nanoseconds():
    for value in (0.001, 0.002, 0.003):
        _metrics.metric("CompileTime").add(value)
    total, accumulated, recent = met.metric_data("CompileTime")
    assert total == 3 and accumulated == pytest.approx(6e6)
    assert [v for _, v in recent] == pytest.approx([1e6, 2e6, 3e6])
    assert all(isinstance(stamp, int) for stamp, _ in recent)
    assert met.metric_names() == ["CompileTime"]


def test_metric_report_lines():
    for value in (0.001, 0.002, 0.003):
        _metrics.metric("CompileTime").add(value)
    report = met.metrics_report()
    assert report.startswith(
        "Metric: CompileTime\n  TotalSamples: 3\n  Accumulator: 006ms000.000us\n"
    )
    lines = report.splitlines()
    assert lines[3].startswith("  ValueRate: ") and lines[3].endswith(" / second")
    assert lines[4].startswith("  Rate: ") and lines[4].endswith(" / second")
    assert lines[5] == (
        "  Percentiles: 1%=001ms000.000us; 5%=001ms000.000us; 10%=001ms000.000us; "
        "20%=001ms000.000us; 50%=002ms000.000us; 80%=003ms000.000us; 90%=003ms000.000us; "
        "95%=003ms000.000us; 99%=003ms000.000us"
    )


def test_a_single_sample_has_no_rate():
    _metrics.metric("InboundData").add(1.54 * 2**20)
    assert met.metrics_report() == (
        "Metric: InboundData\n  TotalSamples: 1\n  Accumulator: 1.54MB\n"
        "  Percentiles: 1%=1.54MB; 5%=1.54MB; 10%=1.54MB; 20%=1.54MB; 50%=1.54MB; "
        "80%=1.54MB; 90%=1.54MB; 95%=1.54MB; 99%=1.54MB\n"
    )


def test_percentiles_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("XLA_METRICS_PERCENTILES", "0.5:0.25")
    _metrics.metric("TensorsGraphSize").add(7)
    assert "  Percentiles: 25%=7.00; 50%=7.00\n" in met.metrics_report()
    monkeypatch.setenv("XLA_METRICS_PERCENTILES", "50")
    with pytest.raises(ValueError, match="XLA_METRICS_PERCENTILES='50'"):
        met.metrics_report()


def test_report_is_sorted_metrics_then_counters():
    _metrics.counter("UncachedCompile").inc()
    _metrics.counter("CachedCompile").inc()
    _metrics.metric("TransferToDeviceTime").add(1e-3)
    _metrics.metric("CompileTime").add(1e-3)
    heads = [line for line in met.metrics_report().splitlines() if not line.startswith(" ")]
    assert heads == ["Metric: CompileTime", "Metric: TransferToDeviceTime",
                     "Counter: CachedCompile", "Counter: UncachedCompile"]


def test_short_report_defaults_and_fallbacks():
    _metrics.metric("CompileTime").add(1e-3)
    _metrics.metric("TensorsGraphSize").add(3)
    _metrics.counter("MarkStep").inc()
    _metrics.counter("UncachedCompile").inc()
    _metrics.counter("aten::nonzero").inc()
    _metrics.counter("CreateCompileHandles").inc()
    short = met.short_metrics_report()
    assert "CompileTime" in short and "MarkStep" in short and "aten::nonzero" in short
    assert "TensorsGraphSize" not in short and "UncachedCompile" not in short
    custom = met.short_metrics_report(counter_names=["CreateCompileHandles"])
    assert "CreateCompileHandles" in custom and "MarkStep" not in custom
    assert "CompileTime" in custom  # the default metrics when none are named
    custom = met.short_metrics_report(["aten::nonzero"], ["TensorsGraphSize"])
    assert custom.count("aten::nonzero") == 1 and "CompileTime" not in custom


def test_clear_counters_keeps_metrics_and_clear_metrics_keeps_counters():
    _metrics.counter("MarkStep").inc()
    _metrics.metric("ExecuteTime").add(1e-3)
    met.clear_counters()
    assert met.counter_names() == [] and met.metric_names() == ["ExecuteTime"]
    _metrics.counter("MarkStep").inc()
    met.clear_metrics()
    assert met.metric_data("ExecuteTime") is None and met.counter_value("MarkStep") == 1
    met.clear_all()
    assert met.metrics_report() == ""


def test_executed_fallback_ops_lists_namespaced_op_counters():
    for name in ("aten::nonzero", "torchvision::nms", "xla::add", "MarkStep"):
        _metrics.counter(name).inc()
    assert met.executed_fallback_ops() == ["aten::nonzero", "torchvision::nms"]
    met.clear_all()
    assert met.executed_fallback_ops() == []


def test_a_printed_report_reads_back_into_the_same_values():
    _metrics.metric("CompileTime").add(1.25)
    _metrics.metric("InboundData").add(3 * 2**20)
    _metrics.metric("TensorsGraphSize").add(12)
    _metrics.counter("CachedCompile").inc(4)
    points = mcu.parse_metrics_report(met.metrics_report())
    assert points["CompileTime__Accumulator_sec"] == pytest.approx(1.25)
    assert points["CompileTime__Percentile_99_sec"] == pytest.approx(1.25)
    assert points["InboundData__Accumulator_mb"] == pytest.approx(3.0)  # reads MB as 1e6 B units
    assert points["TensorsGraphSize__Accumulator"] == 12.0
    assert points["CachedCompile__Value"] == 4


def test_engine_events_reach_the_report():
    device = torch_xla.device()
    torch_xla.sync()
    met.clear_all()
    t = torch.tensor([1.0, 0.0, 2.0], device=device)
    (t.atan2(t + 0.5).expm1() * 2).cpu()  # a graph no other test compiles
    torch.nonzero(t)
    names, counters = met.metric_names(), met.counter_names()
    for name in ("CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime"):
        assert name in names
    assert {"UncachedCompile", "CreateXlaTensor", "aten::nonzero"} <= set(counters)
    assert "aten::nonzero" in met.executed_fallback_ops()
    assert met.metric_data("TransferToDeviceTime")[1] > 0
    assert torch_xla._XLAC._xla_metrics_report() == met.metrics_report()
