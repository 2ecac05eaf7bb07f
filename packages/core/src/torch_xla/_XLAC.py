"""The few `torch_xla._XLAC` entry points that user code and tools call directly."""

from __future__ import annotations

from torch_xla import _metrics


def _xla_metrics_report() -> str:
    return _metrics.report()


def _xla_sync_multi(tensors, devices=None, wait: bool = True, sync_xla_data: bool = True) -> None:
    from torch_xla.lazy import functional, graph

    graph.sync([functional.unwrap(t) for t in tensors])
    if wait:
        graph.wait_device_ops()
