"""Eager mode: every op runs as soon as it is recorded, as one small computation.

PyTorch/XLA's `torch_xla.experimental.eager_mode(True)`. The engine still records
each op as a node; `tensor.py` hands every pending value a tensor would hold to
`run_node`, which compiles and runs that node alone (its inputs are device data by
then) and returns its outputs as device data. A node with several outputs
(`native_batch_norm`, `_linalg_svd`) runs once for all of them. Programs are cached
like any graph, by the node's structural hash, so an op already seen on the same
shapes never compiles again; compilations and executions are timed as
`EagerOpCompileTime` and `EagerOpExecuteTime`. A sync then finds nothing pending.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch_xla.lazy import graph, ir, tensor


def run_node(node: ir.Node) -> list[ir.Data | None]:
    """Compile (or find) and run `node` alone: its outputs as data, None where unused."""
    wanted = [(node, i) for i, aval in enumerate(node.avals) if aval is not None]
    outputs = iter(graph.execute(node.device, wanted, eager=True))
    return [None if aval is None else next(outputs) for aval in node.avals]


def set_enabled(enable: bool) -> None:
    """Turn eager mode on or off for the whole process (values pending so far stay lazy)."""
    tensor.set_eager_runner(run_node if enable else None)


def enabled() -> bool:
    return tensor.is_eager()


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Ops record (eager mode off) inside the block; the mode before it after."""
    was = enabled()
    set_enabled(False)
    try:
        yield
    finally:
        set_enabled(was)
