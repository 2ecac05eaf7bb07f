"""Counters and metrics, shared by every layer; `torch_xla.debug.metrics` reports them.

A counter is a named integer (`CachedCompile`, `aten::nonzero`). A metric is a
named series of samples with its count, sum and a window of recent samples for
percentiles. Each metric has a unit that decides how the report prints it, as
PyTorch/XLA prints it: a duration (`05m003ms`), a size (`1.54MB`) or a plain
number (`12.00`). Time metrics take their samples in seconds and hand them out
in nanoseconds (`Metric.data()`), PyTorch/XLA's raw unit.

Names are PyTorch/XLA's where the engine records the same event; `UNITS` gives
the unit of every metric that is not a duration.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator

TIME = "time"
BYTES = "bytes"
NUMBER = "number"

# Every metric not named here is a duration.
UNITS: dict[str, str] = {
    "OutboundData": BYTES,  # bytes copied host -> device, one sample per transfer
    "InboundData": BYTES,  # bytes copied device -> host, one sample per transfer
    "TensorsGraphSize": NUMBER,  # nodes of a compiled graph
    "InputOutputAliasCount": NUMBER,  # inputs of a compiled graph donated to its outputs
}

DEFAULT_SAMPLE_WINDOW = 1024  # XLA_METRICS_SAMPLES: recent samples kept per metric
DEFAULT_PERCENTILES = "0.01:0.05:0.1:0.2:0.5:0.8:0.9:0.95:0.99"  # XLA_METRICS_PERCENTILES

_lock = threading.Lock()  # creating counters and metrics; samples are added without it

# Samples are stamped with perf_counter (cheaper than time_ns on the hot path) and the
# stamps turned into wall-clock nanoseconds when read.
_clock = time.perf_counter
_CLOCK_ZERO, _WALL_ZERO_NS = time.perf_counter(), time.time_ns()


def _wall_ns(stamp: float) -> int:
    return _WALL_ZERO_NS + int((stamp - _CLOCK_ZERO) * 1e9)


class Counter:
    __slots__ = ("name", "value")

    def __init__(self, name: str) -> None:
        self.name = name
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount  # a lost increment under a thread race is acceptable


class Metric:
    """Samples of one quantity in `unit` (seconds for `TIME`).

    `add` is on hot paths (every recorded op adds a `LazyTracing` sample), so it takes
    no lock: under a thread race a sample may be lost, as a counter increment may."""

    __slots__ = ("name", "unit", "total_samples", "accumulator", "samples")

    def __init__(self, name: str, unit: str = TIME) -> None:
        self.name = name
        self.unit = unit
        self.total_samples = 0
        self.accumulator = 0.0
        self.samples: collections.deque[tuple[int, float]] = collections.deque(
            maxlen=_sample_window()
        )

    def add(self, value: float) -> None:
        self.total_samples += 1
        self.accumulator += value
        self.samples.append((_clock(), value))

    def add_since(self, start: float) -> None:
        """A time sample from `start` (a `time.perf_counter()` reading) until now."""
        now = _clock()
        elapsed = now - start
        self.total_samples += 1
        self.accumulator += elapsed
        self.samples.append((now, elapsed))

    def snapshot(self) -> tuple[int, float, list[tuple[int, float]]]:
        """(total samples, sum, recent (timestamp ns, value)) in the metric's own unit."""
        total, accumulator, samples = self.total_samples, self.accumulator, tuple(self.samples)
        return total, accumulator, [(_wall_ns(stamp), value) for stamp, value in samples]

    def data(self) -> tuple[int, float, list[tuple[int, float]]]:
        """(total samples, sum, recent (timestamp ns, value)), times in nanoseconds."""
        scale = 1e9 if self.unit == TIME else 1.0
        total, accumulator, samples = self.snapshot()
        return total, accumulator * scale, [(stamp, value * scale) for stamp, value in samples]

    def clear(self) -> None:
        self.total_samples = 0
        self.accumulator = 0.0
        self.samples.clear()


# Counters and metrics are never removed, only zeroed, so hot paths may keep the objects.
_counters: dict[str, Counter] = {}
_metrics: dict[str, Metric] = {}


def counter(name: str) -> Counter:
    found = _counters.get(name)
    if found is None:
        with _lock:
            found = _counters.setdefault(name, Counter(name))
    return found


def increment_counter(name: str, amount: int = 1) -> None:
    counter(name).inc(amount)


def metric(name: str, unit: str | None = None) -> Metric:
    """The metric `name`, created on first use with `unit` (default: from `UNITS`)."""
    found = _metrics.get(name)
    if found is None:
        with _lock:
            found = _metrics.setdefault(name, Metric(name, unit or UNITS.get(name, TIME)))
    return found


@contextlib.contextmanager
def timed(name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        metric(name).add(time.perf_counter() - start)


# Called before metrics are read: layers that measure work finishing later (execution
# times) register here to record what has finished. `wait=True` waits for work in flight.
_settle_hooks: list[Callable[[bool], None]] = []


def on_read(hook: Callable[[bool], None]) -> None:
    """Call `hook(wait)` before metrics are read (`settle`)."""
    _settle_hooks.append(hook)


def settle(wait: bool = False) -> None:
    """Record the samples of work that finished (with `wait`, of all work in flight)."""
    for hook in _settle_hooks:
        hook(wait)


def counters() -> dict[str, Counter]:
    return _counters


def metrics() -> dict[str, Metric]:
    return _metrics


def active_counters() -> dict[str, Counter]:
    """Counters with a non-zero value, by name: the ones a report shows."""
    return {n: c for n, c in sorted(_counters.items()) if c.value}


def active_metrics() -> dict[str, Metric]:
    """Metrics with at least one sample, by name."""
    return {n: m for n, m in sorted(_metrics.items()) if m.total_samples}


def is_fallback_counter(name: str) -> bool:
    """`aten::nonzero`, `torchvision::nms`: an op run on the CPU (engine ops count `xla::`)."""
    namespace, sep, _ = name.partition("::")
    return bool(sep) and namespace != "xla"


def fallback_counts() -> dict[str, int]:
    """Every CPU-fallback counter's value, by name (zeros included)."""
    return {n: c.value for n, c in _counters.items() if is_fallback_counter(n)}


_GRAPH_RUNS = ("UncachedCompile", "CachedCompile")  # one of them counts every execution


def engine_runs() -> int:
    """Executions of compiled graphs and device-to-host reads so far: code that makes
    either while a graph is being traced needed a value on the host."""
    return (sum(_counters[n].value for n in _GRAPH_RUNS if n in _counters)
            + metric("TransferFromDeviceTime").total_samples)


def fallback_ops() -> list[str]:
    """The CPU-fallback counters with a non-zero value, by name."""
    return [n for n in active_counters() if is_fallback_counter(n)]


def clear_counters() -> None:
    for c in list(_counters.values()):
        c.value = 0


def clear_metrics() -> None:
    for m in list(_metrics.values()):
        m.clear()


# --- configuration ----------------------------------------------------------


def _sample_window() -> int:
    text = os.environ.get("XLA_METRICS_SAMPLES", "").strip()
    if not text:
        return DEFAULT_SAMPLE_WINDOW
    if not text.isdigit() or int(text) < 1:
        raise ValueError(
            f"XLA_METRICS_SAMPLES={text!r} is not a positive integer; set one, "
            f"or unset it for the default ({DEFAULT_SAMPLE_WINDOW})."
        )
    return int(text)


def percentiles() -> list[float]:
    """The fractions each metric reports, from XLA_METRICS_PERCENTILES (`0.5:0.99`)."""
    text = os.environ.get("XLA_METRICS_PERCENTILES", "").strip() or DEFAULT_PERCENTILES
    try:
        values = sorted(float(part) for part in text.split(":"))
    except ValueError:
        values = []
    if not values or not all(0.0 < v < 1.0 for v in values):
        raise ValueError(
            f"XLA_METRICS_PERCENTILES={text!r} is not a ':'-separated list of fractions "
            f"in (0, 1); write e.g. {DEFAULT_PERCENTILES!r}, or unset it."
        )
    return values


# --- how values print ---------------------------------------------------------

# (suffix, seconds per part, width): every part after the first printed one is
# zero-padded to its width; microseconds keep three decimals (`032.778us`).
_TIME_PARTS = (("d", 86400.0, 2), ("h", 3600.0, 2), ("m", 60.0, 2), ("s", 1.0, 2), ("ms", 1e-3, 3))


def format_duration(seconds: float) -> str:
    """`06m09s401ms746.001us`, the way PyTorch/XLA prints times."""
    text = ""
    rest = max(seconds, 0.0)
    for suffix, scale, width in _TIME_PARTS:
        whole = math.floor(rest / scale)
        if whole >= 1 or text:
            text += f"{whole:0{width}d}{suffix}"
            rest -= whole * scale
    return text + f"{max(rest, 0.0) * 1e6:07.3f}us"


_SIZE_SUFFIXES = ("B", "KB", "MB", "GB", "TB", "PB")


def format_bytes(value: float) -> str:
    """`1.54MB`: powers of 1024, two decimals."""
    index = 0
    while index + 1 < len(_SIZE_SUFFIXES) and value >= 1024.0:
        value /= 1024.0
        index += 1
    return f"{value:.2f}{_SIZE_SUFFIXES[index]}"


def format_number(value: float) -> str:
    return f"{value:.2f}"


_FORMATTERS = {TIME: format_duration, BYTES: format_bytes, NUMBER: format_number}


def format_value(m: Metric, value: float) -> str:
    return _FORMATTERS[m.unit](value)


# --- report -------------------------------------------------------------------


def metric_report(m: Metric) -> str:
    total_samples, accumulator, samples = m.snapshot()
    lines = [
        f"Metric: {m.name}",
        f"  TotalSamples: {total_samples}",
        f"  Accumulator: {format_value(m, accumulator)}",
    ]
    span = (samples[-1][0] - samples[0][0]) / 1e9 if samples else 0.0
    if span > 0:
        window_sum = sum(v for _, v in samples)
        lines.append(f"  ValueRate: {format_value(m, window_sum / span)} / second")
        lines.append(f"  Rate: {len(samples) / span:.6g} / second")
    values = sorted(v for _, v in samples)
    pcts = "; ".join(
        f"{p * 100:g}%={format_value(m, values[int(p * len(values))])}" for p in percentiles()
    )
    lines.append(f"  Percentiles: {pcts}")
    return "\n".join(lines) + "\n"


def counter_report(c: Counter) -> str:
    return f"Counter: {c.name}\n  Value: {c.value}\n"


def report() -> str:
    """Every metric with samples, then every non-zero counter, in name order."""
    parts = [metric_report(m) for m in active_metrics().values()]
    parts += [counter_report(c) for c in active_counters().values()]
    return "".join(parts)


def short_report(counter_names: list[str], metric_names: list[str]) -> str:
    """The metrics and counters named (those with data), then every CPU-fallback counter."""
    metrics_now, counters_now = active_metrics(), active_counters()
    parts = [metric_report(metrics_now[n]) for n in metric_names if n in metrics_now]
    parts += [counter_report(counters_now[n]) for n in counter_names if n in counters_now]
    parts += [
        counter_report(c)
        for n, c in counters_now.items()
        if is_fallback_counter(n) and n not in counter_names
    ]
    return "".join(parts)
