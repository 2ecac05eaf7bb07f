"""Graphs that span every replica of a multi-process job: collectives inside one program.

Under `xmp.spawn` each process drives one device, and all devices of the job
form the replicas. A collective (`xm.all_reduce` and its siblings) is recorded
as an IR node like any op; a graph holding one compiles as one replicated
program, `shard_map` over a mesh of all devices, which every process runs with
its own values. XLA then moves the data between devices itself (over gloo on
the CPU), inside the compiled step, with no host round trip.

Every process must therefore build the same graphs in the same order, as
PyTorch/XLA also requires.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
import torch
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from torch_xla.lazy import dispatch, functional, ir
from torch_xla.lazy.tensor import XLATensor
from torch_xla.lowering.collectives import AXIS
from torch_xla.pjrt import distributed
from torch_xla.pjrt.client import XlaRuntimeError, client

_SPEC = PartitionSpec(AXIS)
_sharding: NamedSharding | None = None


def _replica_sharding() -> NamedSharding:
    """Each replica's block along a leading axis, one block per device of the job."""
    global _sharding
    if _sharding is None:
        runtime = client()
        if len(runtime.devices) != 1:
            raise XlaRuntimeError(
                f"Collectives need one device per process, but this process drives "
                f"{len(runtime.devices)} {runtime.name} devices. Start one process per device "
                "with xmp.spawn."
            )
        _sharding = NamedSharding(Mesh(np.array(runtime.global_devices), (AXIS,)), _SPEC)
    return _sharding


def world() -> int:
    return len(client().global_devices)


# --- recording ------------------------------------------------------------------


def record(
    rule: Callable, op: str, tensors: Sequence[Any], static: dict, out_avals: Sequence[ir.Aval]
) -> list[Any]:
    """Record collective `rule` on XLA tensors; returns one user tensor per output aval."""
    inner = [_engine_tensor(t, op) for t in tensors]
    device = inner[0]._node.device
    values = [(t._node, t._index) for t in inner]
    template = (tuple(ir.Slot(i) for i in range(len(inner))), tuple(sorted(static.items())))
    key_hash = hash((op, template, tuple(n.avals[i] for n, i in values), tuple(out_avals)))
    node = ir.Node(op, rule, template, values, tuple(out_avals), device, key_hash)
    return [functional.wrap(XLATensor(node, i)) for i in range(len(out_avals))]


def _engine_tensor(t: Any, op: str) -> XLATensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op} takes XLA tensors, got {type(t).__name__}")
    if t.device.type != "xla":
        raise dispatch.not_xla_error(t)
    return functional.unwrap(t)


# --- compiling and running --------------------------------------------------------


class ReplicatedProgram:
    """A compiled replicated graph; remembers which outputs are 0-d."""

    __slots__ = ("compiled", "scalar_out")

    def __init__(self, compiled: Any, scalar_out: list[bool]) -> None:
        self.compiled = compiled
        self.scalar_out = scalar_out

    def as_text(self) -> str:
        return self.compiled.as_text()


def compile(
    graph_fn: Callable, args: Sequence[jax.Array], out_avals, fingerprint: str
) -> ReplicatedProgram:
    """Compile `graph_fn(key, *arrays)` (one replica's graph) as the job's replicated program.

    `fingerprint` names the graph's structure and constants; every process must compile the
    same one (checked through the coordinator before compiling).
    """
    _check_same_program(fingerprint)
    scalar_in = [a.ndim == 0 for a in args]
    scalar_out = [aval is not None and len(aval[0]) == 0 for aval in out_avals]

    def per_replica(*blocks):
        arrays = [b.reshape(()) if s else b for b, s in zip(blocks, scalar_in, strict=True)]
        outs = graph_fn(*arrays)
        return tuple(o.reshape(1) if s else o for o, s in zip(outs, scalar_out, strict=True))

    spanned = jax.shard_map(
        per_replica,
        mesh=_replica_sharding().mesh,
        in_specs=tuple(_SPEC for _ in args),
        out_specs=tuple(_SPEC for _ in out_avals),
        check_vma=False,
    )
    # Not kept in the persistent cache: the program is bound to this job's devices.
    compiled = client().compile(None, spanned, *[_global(a) for a in args])
    return ReplicatedProgram(compiled, scalar_out)


# Seconds a process waits for the others to reach the same replicated compilation.
SAME_PROGRAM_TIMEOUT = 300


def _check_same_program(fingerprint: str) -> None:
    """Every process compiles this program now, or a clear error instead of a hang.

    XLA runs the replicated program as SPMD: copies that differ between processes (a
    Python number that depends on the ordinal baked into the graph, or one process
    building a collective the others do not) would exchange mismatched buffers or wait
    on each other forever.
    """
    mine = hashlib.sha256(fingerprint.encode()).hexdigest()
    try:
        seen = distributed.exchange("replicated-program", mine.encode(), SAME_PROGRAM_TIMEOUT)
    except Exception as error:
        raise XlaRuntimeError(
            f"Process {distributed.process_id()} compiled a graph with collectives, but not every "
            f"process reached the same compilation within {SAME_PROGRAM_TIMEOUT} s ({error}). "
            "Every process must run the same collectives in the same order."
        ) from error
    differing = [rank for rank, theirs in enumerate(seen) if theirs.decode() != mine]
    if differing:
        raise XlaRuntimeError(
            f"Process {distributed.process_id()} built a different graph from process(es) "
            f"{differing} for the same step with collectives. Every process must record the "
            "same graph: pass values that differ per process (the ordinal, per-process "
            "counts) as tensors, e.g. torch.tensor(rank).to(device), not as Python numbers "
            "in ops such as torch.full(..., rank) or x * rank, which are compiled into the "
            "program."
        )


def _global(local: jax.Array) -> jax.Array:
    """The job-wide array whose block on this process's device is `local`."""
    if local.ndim == 0:
        local = local.reshape(1)
    shape = (local.shape[0] * world(), *local.shape[1:])
    return jax.make_array_from_single_device_arrays(shape, _replica_sharding(), [local])


def execute(program: ReplicatedProgram, key: jax.Array, arrays: list[jax.Array]) -> list:
    results = program.compiled(_global(key), *[_global(a) for a in arrays])
    local = [r.addressable_data(0) for r in results]
    return [r.reshape(()) if s else r for r, s in zip(local, program.scalar_out, strict=True)]
