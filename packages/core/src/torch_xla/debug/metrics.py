"""Metrics and counters, as PyTorch/XLA's `torch_xla.debug.metrics` exposes them.

A counter or metric that was cleared, or never recorded, is absent: its name is
not listed and its value or data is None. Reading or clearing metrics first waits
for the executions in flight, so `ExecuteTime` counts every execution launched
before the read (the execution itself never waits for the metric).
"""

from __future__ import annotations

from torch_xla import _metrics

DEFAULT_SHORT_COUNTERS = ("CachedCompile", "MarkStep", "DynamoSyncInputExecuteTime")
DEFAULT_SHORT_METRICS = (
    "CompileTime",
    "ExecuteTime",
    "ExecuteReplicatedTime",
    "TransferToDeviceTime",
    "TransferFromDeviceTime",
)


def counter_names() -> list[str]:
    """The names of the counters with a non-zero value."""
    return list(_metrics.active_counters())


def counter_value(name: str) -> int | None:
    """The counter's value, or None when it is zero or unknown."""
    found = _metrics.active_counters().get(name)
    return found.value if found is not None else None


def metric_names() -> list[str]:
    """The names of the metrics with at least one sample."""
    _metrics.settle(wait=True)
    return list(_metrics.active_metrics())


def metric_data(name: str) -> tuple[int, float, list[tuple[int, float]]] | None:
    """(total samples, accumulated value, recent (timestamp ns, value) samples), or None.

    Time metrics are in nanoseconds, byte metrics in bytes.
    """
    _metrics.settle(wait=True)
    found = _metrics.active_metrics().get(name)
    return found.data() if found is not None else None


def clear_counters() -> None:
    _metrics.clear_counters()


def clear_metrics() -> None:
    _metrics.settle(wait=True)  # a running execution's time must not land after the clear
    _metrics.clear_metrics()


def clear_all() -> None:
    clear_metrics()
    clear_counters()


def metrics_report() -> str:
    """Every metric and counter, in the report format PyTorch/XLA users know."""
    _metrics.settle(wait=True)
    return _metrics.report()


def short_metrics_report(
    counter_names: list[str] | None = None, metric_names: list[str] | None = None
) -> str:
    """The few figures that usually explain a slow step, and every CPU fallback.

    An empty or missing list means the default one.
    """
    _metrics.settle(wait=True)
    return _metrics.short_report(
        list(counter_names or DEFAULT_SHORT_COUNTERS), list(metric_names or DEFAULT_SHORT_METRICS)
    )


def executed_fallback_ops() -> list[str]:
    """The ops that ran on the CPU since the counters were last cleared (`aten::nonzero`,
    `torchvision::nms`; `.item()` counts as `aten::_local_scalar_dense`), by name."""
    return _metrics.fallback_ops()
