"""Read metrics reports back into numbers and compare a report with earlier ones.

`parse_metrics_report` turns a `met.metrics_report()` text into data points named
`<Metric>__<Field>[_<unit>]`: durations in seconds (`_sec`), sizes in megabytes
(`_mb`), plain numbers without a unit; counters become `<Counter>__Value`.
"""

from __future__ import annotations

import collections
import re
import statistics
from typing import Any

_PERCENTILE_LABELS = ("1", "5", "10", "20", "50", "80", "90", "95", "99")
_SERVER_PERCENTILE_LABELS = ("25", "50", "80", "90", "95", "99")

_METRIC_HEAD = r"Metric: (?P<metric_name>\S+)\s+TotalSamples: (?P<TotalSamples>\d+)\s+"
_METRIC_HEAD += r"Accumulator: (?P<Accumulator>\S+)[^P]+Percentiles: "


def _percentiles_pattern(labels: tuple[str, ...], names: tuple[str, ...]) -> str:
    pairs = zip(labels, names, strict=True)
    return "; ".join(f"{label}%=(?P<Percentile_{name}>\\S+)" for label, name in pairs)


_METRIC_REGEX = re.compile(
    _METRIC_HEAD + _percentiles_pattern(_PERCENTILE_LABELS, _PERCENTILE_LABELS)
)
# Reports from a metrics server list 25% where the client lists 20%; it fills Percentile_20.
_SERVER_METRIC_REGEX = re.compile(
    _METRIC_HEAD + _percentiles_pattern(_SERVER_PERCENTILE_LABELS, ("20",) + _PERCENTILE_LABELS[4:])
)
_COUNTER_REGEX = re.compile(r"Counter: (\S+)\s+Value: (\d+)")

_TIME_REGEX = re.compile(
    r"((?P<d>\d+)d)?((?P<h>\d+)h)?((?P<m>\d+)m(?!s))?((?P<s>\d+)s)?((?P<ms>\d+)ms)?"
    r"((?P<us>[\d.]+)us)?$",
    re.IGNORECASE,
)
_SECONDS_PER = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}

_SIZE_REGEX = re.compile(
    r"((?P<PB>[\d.]+)PB)?((?P<TB>[\d.]+)TB)?((?P<GB>[\d.]+)GB)?((?P<MB>[\d.]+)MB)?"
    r"((?P<KB>[\d.]+)KB)?((?P<B>[\d.]+)B)?$",
    re.IGNORECASE,
)
# Decimal megabytes, as PyTorch/XLA's comparison tools count them.
_MEGABYTES_PER = {"PB": 1e9, "TB": 1e6, "GB": 1e3, "MB": 1.0, "KB": 1e-3, "B": 1e-6}


def _sum_parts(regex: re.Pattern, text: str, scale: dict[str, float]) -> float | None:
    match = regex.match(text)
    if match is None or not any(match.groupdict().values()):
        return None
    return sum(float(v) * scale[k] for k, v in match.groupdict().items() if v is not None)


def metric_str_to_number(text: str) -> tuple[float, str]:
    """(value, unit) of one printed value: `''` for a number, `'sec'` or `'mb'`."""
    try:
        return float(text), ""
    except ValueError:
        pass
    seconds = _sum_parts(_TIME_REGEX, text, _SECONDS_PER)
    if seconds is not None:
        return seconds, "sec"
    megabytes = _sum_parts(_SIZE_REGEX, text, _MEGABYTES_PER)
    if megabytes is not None:
        return megabytes, "mb"
    raise ValueError(
        f"Cannot read metric value {text!r}: expected a number, a duration such as "
        "'01m02s003ms4.5us' or a size such as '1.54MB'."
    )


def parse_metrics_report(report: str, dehumanize: bool = True) -> dict[str, Any]:
    """Every metric field and counter of `report`, by data-point name.

    With `dehumanize=False` each metric value is `(number, printed text)`.
    """
    data_points: dict[str, Any] = {}
    for regex in (_METRIC_REGEX, _SERVER_METRIC_REGEX):
        for match in regex.finditer(report):
            fields = match.groupdict()
            name = fields.pop("metric_name")
            for field, text in fields.items():
                value, unit = metric_str_to_number(text)
                key = f"{name}__{field}{'_' if unit else ''}{unit}"
                data_points[key] = value if dehumanize else (value, text)
    for name, value in _COUNTER_REGEX.findall(report):
        data_points[f"{name}__Value"] = int(value)
    return data_points


def get_data_points_from_metrics_reports(metrics_reports: list[str]) -> dict[str, list]:
    """For each data point, its value in each report (None where a report lacks it)."""
    data_points: dict[str, list] = collections.defaultdict(lambda: [None] * len(metrics_reports))
    for index, report in enumerate(metrics_reports):
        for key, value in parse_metrics_report(report).items():
            data_points[key][index] = value
    return data_points


def _aggregates(data_points: dict[str, list]) -> dict[str, tuple[float, float]]:
    """(mean, population standard deviation) of each data point's known values."""
    result = {}
    for key, values in data_points.items():
        known = [v for v in values if v is not None]
        if known:
            result[key] = (statistics.fmean(known), statistics.pstdev(known))
    return result


DEFAULT_CONFIG = {"base_expression": "v <= v_mean + (v_stddev * 2.0)"}


def compare_metrics(
    data_points: dict[str, list], metrics_report: str, config: dict[str, str] | None = None
) -> str:
    """One line for each data point of `metrics_report` that fails its expression.

    `config` holds Python expressions over `v` (the new value), `v_mean` and
    `v_stddev` (of `data_points`): `base_expression` for every data point, or
    `<data point>_expression` for one. A CPU-fallback counter (`aten::...`) absent
    from `data_points` is reported as new.
    """
    config = config or DEFAULT_CONFIG
    history = _aggregates(data_points)
    lines = []
    for key, v in sorted(parse_metrics_report(metrics_report).items()):
        if key not in history:
            if key.startswith("aten::"):
                lines.append(f"Found new aten counter: {key}: {v}\n")
            continue
        v_mean, v_stddev = history[key]
        expression = config.get(f"{key}_expression", config["base_expression"])
        verdict = eval(expression, None, {"v": v, "v_mean": v_mean, "v_stddev": v_stddev})
        if verdict == False:  # noqa: E712 - a numpy bool counts too, as in PyTorch/XLA
            lines.append(
                f"{key} failed its expression check. Expression: {expression}.  "
                f"Mean: {v_mean}.  Stddev: {v_stddev}.  Actual Value: {v}\n"
            )
    return "".join(lines)
