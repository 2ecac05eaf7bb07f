"""Metrics and counters, as PyTorch/XLA's `torch_xla.debug.metrics` exposes them."""

from __future__ import annotations

from torch_xla import _metrics


def metrics_report() -> str:
    """Every metric and counter, in the report format PyTorch/XLA users know."""
    return _metrics.report()


def short_metrics_report(
    counter_names: list[str] | None = None, metric_names: list[str] | None = None
) -> str:
    """The few figures that usually explain a slow step."""
    if metric_names is None:
        metric_names = ["CompileTime", "ExecuteTime", "TransferFromDeviceTime"]
    if counter_names is None:
        counter_names = ["CachedCompile", "UncachedCompile", "MarkStep"]
        counter_names += [n for n in _metrics.counters() if n.startswith("aten::")]
    return _metrics.report(metric_names, counter_names)


def counter_names() -> list[str]:
    return sorted(n for n, c in _metrics.counters().items() if c.value)


def counter_value(name: str) -> int | None:
    found = _metrics.counters().get(name)
    return found.value if found is not None else None


def metric_names() -> list[str]:
    return sorted(_metrics.metrics())


def metric_data(name: str) -> tuple[int, float, list[tuple[float, float]]] | None:
    """(total samples, accumulated value, recent (timestamp, value) samples), or None."""
    found = _metrics.metrics().get(name)
    if found is None:
        return None
    return found.total_samples, found.accumulator, list(found.samples)


def clear_counters() -> None:
    _metrics.clear_counters()


def clear_metrics() -> None:
    _metrics.clear_metrics()


def clear_all() -> None:
    clear_counters()
    clear_metrics()
