"""`torch_xla.debug.metrics_compare_utils`: reading reports back and comparing them."""

from __future__ import annotations

import statistics

import pytest

import torch_xla.debug.metrics_compare_utils as mcu

PCTS = "1%={0}; 5%={0}; 10%={0}; 20%={0}; 50%={0}; 80%={0}; 90%={0}; 95%={0}; 99%={0}"


def _report(inbound_total: str = "2.00GB", samples: int = 10, handles: int = 40, extra: str = ""):
    return (
        "leading text\n"
        f"Metric: InboundData\n  TotalSamples: {samples}\n  Accumulator: {inbound_total}\n"
        f"  Rate: 1.5 / second\n  Percentiles: {PCTS.format('1.50MB')}\n"
        "Metric: CompileTime\n  TotalSamples: 3\n  Accumulator: 01m02s003ms004.500us\n"
        f"  ValueRate: 001ms000.000us / second\n  Rate: 2 / second\n"
        f"  Percentiles: {PCTS.format('05m003ms')}\n"
        f"Metric: TensorsGraphSize\n  TotalSamples: 2\n  Accumulator: 14.00\n"
        f"  Percentiles: {PCTS.format('7.00')}\n"
        f"Counter: CreateCompileHandles\n  Value: {handles}\n{extra}trailing text\n"
    )


@pytest.mark.parametrize(
    "text, value, unit",
    [
        ("12", 12.0, ""),
        ("7.50", 7.5, ""),
        ("01m02s003ms004.500us", 62.0030045, "sec"),
        ("05m003ms", 300.003, "sec"),  # minutes, then milliseconds: `m` is not `ms`
        ("02d01h", 2 * 86400 + 3600.0, "sec"),
        ("1s", 1.0, "sec"),
        ("1.54MB", 1.54, "mb"),
        ("64.75TB", 64.75e6, "mb"),
        ("393.00KB", 0.393, "mb"),
        ("10B", 1e-5, "mb"),
    ],
)
def test_values_read_in_seconds_and_megabytes(text, value, unit):
    parsed, parsed_unit = mcu.metric_str_to_number(text)
    assert parsed == pytest.approx(value) and parsed_unit == unit


def test_an_unknown_value_names_it():
    with pytest.raises(ValueError, match="'12 apples'"):
        mcu.metric_str_to_number("12 apples")


def test_parse_report_names_every_field_with_its_unit():
    points = mcu.parse_metrics_report(_report())
    assert points["InboundData__TotalSamples"] == 10
    assert points["InboundData__Accumulator_mb"] == pytest.approx(2000.0)
    assert points["InboundData__Percentile_50_mb"] == pytest.approx(1.5)
    assert points["CompileTime__Accumulator_sec"] == pytest.approx(62.0030045)
    assert points["CompileTime__Percentile_99_sec"] == pytest.approx(300.003)
    assert points["TensorsGraphSize__Accumulator"] == 14.0
    assert points["CreateCompileHandles__Value"] == 40
    assert len([k for k in points if k.startswith("CompileTime__Percentile_")]) == 9
    raw = mcu.parse_metrics_report(_report(), dehumanize=False)
    assert raw["InboundData__Accumulator_mb"] == (pytest.approx(2000.0), "2.00GB")


def test_data_points_keep_report_order_and_mark_missing_values():
    reports = [_report(), _report(handles=41, extra="Counter: UniqueCounter\n  Value: 9\n")]
    points = mcu.get_data_points_from_metrics_reports(reports)
    assert points["CreateCompileHandles__Value"] == [40, 41]
    assert points["UniqueCounter__Value"] == [None, 9]


def test_identical_reports_compare_clean():
    points = mcu.get_data_points_from_metrics_reports([_report()] * 3)
    assert mcu.compare_metrics(points, _report(), {"base_expression": "v == v_mean"}) == ""


def test_strict_comparison_reports_each_changed_value():
    history = [_report(), _report(), _report(samples=13, inbound_total="3.00GB")]
    points = mcu.get_data_points_from_metrics_reports(history)
    diff = mcu.compare_metrics(points, history[-1], {"base_expression": "v == v_mean"})
    mean = statistics.fmean([2000.0, 2000.0, 3000.0])
    stddev = statistics.pstdev([2000.0, 2000.0, 3000.0])
    assert diff.splitlines() == [
        f"InboundData__Accumulator_mb failed its expression check. Expression: v == v_mean.  "
        f"Mean: {mean}.  Stddev: {stddev}.  Actual Value: 3000.0",
        "InboundData__TotalSamples failed its expression check. Expression: v == v_mean.  "
        f"Mean: 11.0.  Stddev: {statistics.pstdev([10, 10, 13])}.  Actual Value: 13.0",  # a float
    ]


def test_default_and_per_point_expressions():
    history = [_report(), _report(), _report(samples=13, inbound_total="3.00GB")]
    points = mcu.get_data_points_from_metrics_reports(history)
    assert mcu.compare_metrics(points, history[-1]) == ""  # within two standard deviations
    diff = mcu.compare_metrics(
        points, history[-1],
        {"base_expression": "True", "InboundData__TotalSamples_expression": "v < v_mean"},
    )
    assert diff.startswith("InboundData__TotalSamples failed") and diff.count("\n") == 1


def test_a_new_fallback_counter_is_reported():
    points = mcu.get_data_points_from_metrics_reports([_report()] * 2)
    report = _report(extra="Counter: aten::nonzero\n  Value: 5\nCounter: xla::add\n  Value: 2\n")
    expected = "Found new aten counter: aten::nonzero__Value: 5\n"
    assert mcu.compare_metrics(points, report) == expected
