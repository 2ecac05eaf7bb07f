"""Counters and timed metrics, shared by every layer; `torch_xla.debug.metrics` reports them.

A counter is a named integer (`CachedCompile`, `aten::nonzero`). A metric is a
named series of samples (`CompileTime` in seconds) with its count, sum and a
window of recent samples for percentiles, as PyTorch/XLA reports them.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator

SAMPLE_WINDOW = 1024  # recent samples kept per metric for percentiles
PERCENTILES = (1, 5, 10, 20, 50, 80, 90, 95, 99)

_lock = threading.Lock()


class Counter:
    __slots__ = ("name", "value")

    def __init__(self, name: str) -> None:
        self.name = name
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount  # a lost increment under a thread race is acceptable


class Metric:
    """Samples of one quantity; `is_time` formats them as durations."""

    def __init__(self, name: str, is_time: bool = True) -> None:
        self.name = name
        self.is_time = is_time
        self.total_samples = 0
        self.accumulator = 0.0
        self.samples: collections.deque[tuple[float, float]] = collections.deque(
            maxlen=SAMPLE_WINDOW
        )

    def add(self, value: float) -> None:
        with _lock:
            self.total_samples += 1
            self.accumulator += value
            self.samples.append((time.time(), value))


_counters: dict[str, Counter] = {}
_metrics: dict[str, Metric] = {}


def counter(name: str) -> Counter:
    found = _counters.get(name)
    if found is None:
        found = _counters.setdefault(name, Counter(name))
    return found


def metric(name: str, is_time: bool = True) -> Metric:
    found = _metrics.get(name)
    if found is None:
        found = _metrics.setdefault(name, Metric(name, is_time))
    return found


@contextlib.contextmanager
def timed(name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        metric(name).add(time.perf_counter() - start)


def counters() -> dict[str, Counter]:
    return _counters


def metrics() -> dict[str, Metric]:
    return _metrics


def clear_counters() -> None:
    _counters.clear()


def clear_metrics() -> None:
    _metrics.clear()


# --- report ---------------------------------------------------------------


def format_duration(seconds: float) -> str:
    """`06m09s401ms746.001us`, the way PyTorch/XLA prints times."""
    micros = seconds * 1e6
    minutes, micros = divmod(micros, 60e6)
    secs, micros = divmod(micros, 1e6)
    millis, micros = divmod(micros, 1e3)
    text = ""
    if minutes:
        text += f"{int(minutes):02d}m"
    if minutes or secs:
        text += f"{int(secs):02d}s"
    if minutes or secs or millis:
        text += f"{int(millis):03d}ms"
    return text + f"{micros:.3f}us"


def _format_value(m: Metric, value: float) -> str:
    return format_duration(value) if m.is_time else f"{value:.2f}"


def _percentile(sorted_values: list[float], pct: int) -> float:
    index = min(len(sorted_values) - 1, int(len(sorted_values) * pct / 100))
    return sorted_values[index]


def metric_report(m: Metric) -> str:
    with _lock:
        samples = list(m.samples)
    lines = [
        f"Metric: {m.name}",
        f"  TotalSamples: {m.total_samples}",
        f"  Accumulator: {_format_value(m, m.accumulator)}",
    ]
    if len(samples) > 1:
        span = max(samples[-1][0] - samples[0][0], 1e-9)
        window_sum = sum(v for _, v in samples[1:])
        lines.append(f"  ValueRate: {_format_value(m, window_sum / span)} / second")
        lines.append(f"  Rate: {(len(samples) - 1) / span:.6g} / second")
    if samples:
        values = sorted(v for _, v in samples)
        pcts = "; ".join(f"{p}%={_format_value(m, _percentile(values, p))}" for p in PERCENTILES)
        lines.append(f"  Percentiles: {pcts}")
    return "\n".join(lines)


def counter_report(c: Counter) -> str:
    return f"Counter: {c.name}\n  Value: {c.value}"


def report(metric_names: list[str] | None = None, counter_names: list[str] | None = None) -> str:
    """Every metric, then every non-zero counter, in name order (or just the ones named)."""
    ms = sorted(metric_names if metric_names is not None else _metrics)
    cs = sorted(counter_names if counter_names is not None else _counters)
    parts = [metric_report(_metrics[n]) for n in ms if n in _metrics]
    parts += [counter_report(_counters[n]) for n in cs if n in _counters and _counters[n].value]
    return "\n".join(parts) + ("\n" if parts else "")
