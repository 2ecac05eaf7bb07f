"""Graphs that span every replica of a job: collectives inside one program.

The replicas are the devices of the job: one per process under `xmp.spawn`, or one
per thread when threads drive several devices of a process (`spawn_threads`,
`DataParallel`, `xmp.spawn` with several devices per process; see `pjrt/threads.py`).
A collective (`xm.all_reduce` and its siblings) is recorded as an IR node like any op;
a graph holding one compiles as one replicated program, `shard_map` over a mesh of
every replica device, which the job runs once per step with every replica's values.
XLA then moves the data between devices itself (over gloo between CPU processes),
inside the compiled step, with no host round trip.

The threads of a process meet at each such step (`threads.Replicas.gather`): the last
to arrive compiles the program the first time, meets the other processes, and runs
it with every local device's inputs; each thread takes back its device's outputs.
Every replica must therefore build the same graphs in the same order, as PyTorch/XLA
also requires.

In a process of its own that drives no replica threads the job has one replica: the
device that holds the graph (XLA_ALWAYS_ALLREDUCE=1 records collectives there too).
`lower_view` lowers a graph, without compiling it, over an abstract mesh of as many
replicas as its collectives name, for `torch_xla._XLAC._get_xla_tensors_hlo`.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from torch_xla.lowering import collectives
from torch_xla.lowering.collectives import AXIS
from torch_xla.pjrt import distributed, threads
from torch_xla.pjrt.client import XlaRuntimeError, client

_SPEC = PartitionSpec(AXIS)
_shardings: dict[tuple, NamedSharding] = {}


# --- who the replicas are ---------------------------------------------------------------


def local_devices() -> list[int]:
    """This process's replica devices (indices), in replica order."""
    group = threads.replicas()
    return [0] if group is None else group.devices


def mesh_devices(device: int | None = None) -> list[jax.Device]:
    """Every replica device of the job, in replica (global ordinal) order. A process of
    its own without replica threads is a job of one replica: `device` (default: the
    calling thread's device)."""
    runtime = client()
    group = threads.replicas()
    if group is None:
        if runtime.process_count() == 1:
            return [runtime.device(threads.current_index() if device is None else device)]
        if len(runtime.devices) != 1:
            raise XlaRuntimeError(
                f"Collectives across the {len(runtime.devices)} {runtime.name} devices of a "
                "process of a multi-process job need one thread per device: run the replicas "
                "with xmp.spawn (it starts them)."
            )
        return list(runtime.global_devices)
    local = [runtime.devices[d] for d in group.devices]
    if runtime.process_count() == 1:
        return local
    if len(local) != len(runtime.devices):
        raise XlaRuntimeError(
            f"In a job of {runtime.process_count()} processes every process drives all its "
            f"devices as replicas; this one drives {len(local)} of {len(runtime.devices)}."
        )
    return list(runtime.global_devices)


def world() -> int:
    return len(mesh_devices())


def world_size() -> int:
    """Number of replicas (`xr.world_size()`): every device of the job under xmp.spawn,
    every device that replica threads drive (spawn_threads, DataParallel), else 1."""
    if threads.replicas() is not None:
        return world()
    runtime = client()
    if distributed.topology() is not None or runtime.process_count() > 1:
        return runtime.global_device_count()
    return 1


def ordinal(device: int) -> int:
    """The replica ordinal (global ordinal) of this process's device `device`."""
    return mesh_devices().index(client().device(device))


def dump_ordinal(device: int) -> int:
    """The ordinal that names `device`'s debug files: the global one in a job of several
    replicas (processes or threads), else the device's index in its process."""
    if threads.replicas() is not None:
        return ordinal(device)
    if distributed.topology() is None:
        return device
    runtime = client()
    return runtime.global_devices.index(runtime.device(device))


def _sharding(devices: list[jax.Device]) -> NamedSharding:
    """Each replica's block along a leading axis, one block per replica device."""
    key = tuple(d.id for d in devices)
    found = _shardings.get(key)
    if found is None:
        found = _shardings[key] = NamedSharding(Mesh(np.array(devices), (AXIS,)), _SPEC)
    return found


# --- compiling and running --------------------------------------------------------


class ReplicatedProgram:
    """A replicated graph; compiled when the replicas first run it together."""

    __slots__ = ("compiled", "graph_fn", "fingerprint", "scalar_in", "scalar_out")

    def __init__(self, graph_fn: Callable, fingerprint: str, scalar_in: list[bool],
                 scalar_out: list[bool]) -> None:
        self.compiled: Any = None
        self.graph_fn = graph_fn
        self.fingerprint = fingerprint
        self.scalar_in = scalar_in
        self.scalar_out = scalar_out

    def as_text(self) -> str:
        return self.compiled.as_text()


def compile(
    graph_fn: Callable, args: Sequence[jax.Array], out_avals, fingerprint: str
) -> ReplicatedProgram:
    """`graph_fn(*arrays)` (one replica's graph) as the job's replicated program.

    `fingerprint` names the graph's structure and constants; every replica must run the
    same one (checked between threads and, through the coordinator, between processes).
    """
    scalar_in = [a.ndim == 0 for a in args]
    scalar_out = [aval is not None and len(aval[0]) == 0 for aval in out_avals]
    return ReplicatedProgram(graph_fn, fingerprint, scalar_in, scalar_out)


def execute(program: ReplicatedProgram, arrays: list[jax.Array]) -> list:
    """Run `program` with this replica's `arrays`; this replica's outputs."""
    group = threads.replicas()
    if group is None:
        return _run_together([(program, arrays)])[0]
    return group.gather("a step with collectives", (program, arrays), _run_together)


def _run_together(entries: list[tuple[ReplicatedProgram, list]]) -> list[list]:
    """Every local replica's (program, arrays), in replica order -> each one's outputs."""
    programs = [program for program, _ in entries]
    _check_same_in_threads(programs)
    multiprocess = distributed.joined()
    mesh = mesh_devices(_device_of(entries[0][1]))
    sharding = _sharding(mesh)
    per_replica_args = [arrays for _, arrays in entries]
    compiled = next((p.compiled for p in programs if p.compiled is not None), None)
    if compiled is None:
        if multiprocess:
            _check_same_program(programs[0].fingerprint)
        compiled = _compile(programs[0], per_replica_args, sharding)
    for program in programs:
        program.compiled = compiled
    if multiprocess:
        # A process whose peer never reaches this step would block inside XLA's collective
        # for good; meeting at the coordinator first bounds the wait
        # (TORCH_XLA_COLLECTIVE_TIMEOUT) and names the absent processes.
        distributed.barrier("replicated-step", what="the start of a step with collectives")
    results = compiled(*_global_args(programs[0], per_replica_args, sharding))
    solo = threads.replicas() is None and client().process_count() == 1
    devices = mesh if solo else [client().device(d) for d in local_devices()]
    parts = [{s.device: s.data for s in r.addressable_shards} for r in results]
    return [
        [r[device].reshape(()) if s else r[device]
         for r, s in zip(parts, programs[0].scalar_out, strict=True)]
        for device in devices
    ]


def _device_of(arrays: list[jax.Array]) -> int | None:
    """The index of the device holding a graph's arguments (None without arguments)."""
    if not arrays:
        return None
    return client().devices.index(next(iter(arrays[0].devices())))


def _spanned(program: ReplicatedProgram, mesh: Mesh | AbstractMesh) -> Callable:
    """The job's function: `program.graph_fn` run by every replica of `mesh` on its block."""
    scalar_in, scalar_out, graph_fn = program.scalar_in, program.scalar_out, program.graph_fn

    def per_replica(*blocks):
        arrays = [b.reshape(()) if s else b for b, s in zip(blocks, scalar_in, strict=True)]
        outs = graph_fn(*arrays)
        return tuple(o.reshape(1) if s else o for o, s in zip(outs, scalar_out, strict=True))

    return jax.shard_map(
        per_replica,
        mesh=mesh,
        in_specs=tuple(_SPEC for _ in scalar_in),
        out_specs=tuple(_SPEC for _ in scalar_out),
        check_vma=False,
    )


def _compile(lead: ReplicatedProgram, per_replica_args: list[list],
             sharding: NamedSharding) -> Any:
    # Not kept in the persistent cache: the program is bound to this job's devices.
    return client().compile(None, _spanned(lead, sharding.mesh),
                            *_global_args(lead, per_replica_args, sharding))


def lower_view(graph_fn: Callable, args: Sequence[jax.Array], out_avals, world: int) -> Any:
    """`graph_fn` (one replica's graph) lowered, not compiled, as the program of a job of
    `world` replicas: the text of a graph whose collectives name more replicas than this
    job has (PyTorch/XLA's tests read it in a world of one), with their replica groups."""
    program = compile(graph_fn, args, out_avals, fingerprint="")
    mesh = AbstractMesh((world,), (AXIS,))
    shapes = [jax.ShapeDtypeStruct((a.shape[0] * world, *a.shape[1:]) if a.ndim else (world,),
                                   a.dtype) for a in args]
    with collectives.showing():
        traced = jax.jit(_spanned(program, mesh)).trace(*shapes)
        return traced.lower(lowering_platforms=(client().devices[0].platform,))


def _check_same_in_threads(programs: list[ReplicatedProgram]) -> None:
    prints = [p.fingerprint for p in programs]
    differing = [f"xla:{d}" for d, p in zip(local_devices(), prints, strict=True)
                 if p != prints[0]]
    if differing:
        raise XlaRuntimeError(
            f"The replica threads of {differing} built a different graph from the thread of "
            f"xla:{local_devices()[0]} for the same step with collectives. {_SAME_GRAPH}"
        )


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
            f"{differing} for the same step with collectives. {_SAME_GRAPH}"
        )


_SAME_GRAPH = (
    "Every replica must record the same graph: pass values that differ per replica (the "
    "ordinal, per-replica counts) as tensors, e.g. torch.tensor(rank).to(device), not as "
    "Python numbers in ops such as torch.full(..., rank) or torch.arange(rank), which are "
    "compiled into the program (x * rank and x + rank are fine: such numbers are program "
    "inputs in a replicated job)."
)


def _global_args(program: ReplicatedProgram, per_replica_args: list[list],
                 sharding: NamedSharding) -> list[jax.Array]:
    """Argument i of the job: the arrays of every local replica as its blocks."""
    return [
        _global([args[i] for args in per_replica_args], scalar, sharding)
        for i, scalar in enumerate(program.scalar_in)
    ]


def _global(blocks: list[jax.Array], scalar: bool, sharding: NamedSharding) -> jax.Array:
    """The job-wide array whose blocks on this process's devices are `blocks`."""
    if scalar:
        blocks = [b.reshape(1) for b in blocks]
    replicas = len(sharding.mesh.devices.flat)
    shape = (blocks[0].shape[0] * replicas, *blocks[0].shape[1:])
    return jax.make_array_from_single_device_arrays(shape, sharding, blocks)


# --- rendezvous across threads and processes ------------------------------------------


def rendezvous(tag: str, payload: bytes) -> list[bytes]:
    """Every replica's `payload` for `tag`, by replica ordinal; a barrier for the job."""
    group = threads.replicas()
    if group is None:
        return distributed.exchange(tag, payload)
    return group.gather(f"rendezvous {tag!r}", payload,
                        lambda local: _exchange_threads(tag, local))


def _exchange_threads(tag: str, local: list[bytes]) -> list[list[bytes]]:
    """The local replicas' payloads -> every replica's, once per local replica."""
    if distributed.joined():
        everyone = [p for blob in distributed.exchange(tag, pickle.dumps(local))
                    for p in pickle.loads(blob)]
    else:
        everyone = list(local)
    return [everyone] * len(local)
