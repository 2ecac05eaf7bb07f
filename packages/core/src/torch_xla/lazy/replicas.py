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
from jax.sharding import Mesh, NamedSharding, PartitionSpec

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
    """Compile `graph_fn(*arrays)` (one replica's graph) as the job's replicated program.

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


def _check_same_program(fingerprint: str) -> None:
    """Every process compiles this program now, or a clear error instead of a hang.

    XLA runs the replicated program as SPMD: copies that differ between processes (a
    Python number that depends on the ordinal baked into the graph, or one process
    building a collective the others do not) would exchange mismatched buffers or wait
    on each other forever.
    """
    mine = hashlib.sha256(fingerprint.encode()).hexdigest()
    # Waits at most TORCH_XLA_COLLECTIVE_TIMEOUT, then raises naming the absent processes.
    seen = distributed.exchange(
        "replicated-program", mine.encode(), what="the compilation of a step with collectives"
    )
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


def execute(program: ReplicatedProgram, arrays: list[jax.Array]) -> list:
    # A process whose peer never reaches this step would block inside XLA's collective
    # for good; meeting at the coordinator first bounds the wait (TORCH_XLA_COLLECTIVE_TIMEOUT)
    # and names the absent processes.
    distributed.barrier("replicated-step", what="the start of a step with collectives")
    results = program.compiled(*[_global(a) for a in arrays])
    local = [r.addressable_data(0) for r in results]
    return [r.reshape(()) if s else r for r, s in zip(local, program.scalar_out, strict=True)]
