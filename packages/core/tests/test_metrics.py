"""The metrics store and its report format."""

import pytest

import torch_xla.debug.metrics as met
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
        (0.001032778, "001ms32.778us"),
        (21.102853173, "21s102ms853.173us"),
        (0.000005, "5.000us"),
    ],
)
def test_durations_print_as_pytorch_xla_prints_them(seconds, text):
    assert _metrics.format_duration(seconds) == text


def test_counters_report_value_and_names():
    _metrics.counter("CachedCompile").inc()
    _metrics.counter("CachedCompile").inc(2)
    _metrics.counter("aten::nonzero").inc()
    assert met.counter_value("CachedCompile") == 3
    assert met.counter_value("Missing") is None
    assert met.counter_names() == ["CachedCompile", "aten::nonzero"]
    assert "Counter: CachedCompile\n  Value: 3" in met.metrics_report()
    assert "Counter: aten::nonzero\n  Value: 1" in met.short_metrics_report()


def test_metric_report_has_samples_accumulator_rate_and_percentiles():
    for value in (0.001, 0.002, 0.003):
        _metrics.metric("CompileTime").add(value)
    samples, accumulated, recent = met.metric_data("CompileTime")
    assert samples == 3 and accumulated == pytest.approx(0.006) and len(recent) == 3
    report = met.metrics_report()
    assert report.startswith("Metric: CompileTime\n  TotalSamples: 3\n  Accumulator: 006ms0.000us")
    assert "  Rate: " in report and "/ second" in report
    assert "Percentiles: 1%=001ms0.000us; 5%=001ms0.000us" in report
    assert met.metric_names() == ["CompileTime"]


def test_clear_all_empties_the_report():
    _metrics.counter("UncachedCompile").inc()
    with _metrics.timed("ExecuteTime"):
        pass
    met.clear_all()
    assert met.metrics_report() == ""
    assert met.metric_data("ExecuteTime") is None
