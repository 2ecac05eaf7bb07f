"""SPMD mode of the runtime: `xla:0` is one virtual device over every device of the job.

With SPMD on (`xr.use_spmd()` or `XLA_USE_SPMD=1`), a tensor's device data is one
global `jax.Array` laid out over all devices: replicated when it is copied from the
host, sharded once `xs.mark_sharding` asks for it, and as XLA's partitioner chose for
the outputs of a compiled step. The step itself is jitted as in the other mode; jax
hands its input shardings (and the sharding constraints recorded in the graph) to
XLA's SPMD partitioner. Nothing here partitions: it places and reads global arrays.

The mode is per process and, as in PyTorch/XLA, turning it on is one-way for the
engine (tensors made before keep their data and are replicated on first use);
`is_spmd()` reads the variable, which is what upstream's API reports.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np
from jax._src import config as jax_config
from jax._src.lib import xla_client
from jax._src.sharding_impls import GSPMDSharding
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from torch_xla.pjrt import distributed

USE_SPMD_VARIABLE = "XLA_USE_SPMD"

_on = False


def requested() -> bool:
    """Whether XLA_USE_SPMD asks for SPMD (PyTorch/XLA's flag: 1/true/yes)."""
    return os.environ.get(USE_SPMD_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


def enable() -> None:
    global _on
    _on = True


def enabled() -> bool:
    """Whether the engine runs programs over the virtual device (from the first
    `enable()`, or XLA_USE_SPMD=1 when the runtime started)."""
    return _on


@functools.lru_cache(maxsize=8)
def replicated(devices: tuple) -> NamedSharding:
    """The whole array on every one of `devices`."""
    return NamedSharding(Mesh(np.array(devices, dtype=object), ("devices",)), PartitionSpec())


def over_processes() -> bool:
    """Whether this is SPMD over several processes (a process per host, one program over
    every device of all of them). Then the processes are the replicas that meet
    (`xm.rendezvous`, `xm.mesh_reduce`), and reading a tensor's value to the host (or
    running a pending program) is a step they must all take together: a tile another
    process holds comes by a collective. A save or callback that only one process makes
    must then read on all."""
    return _on and distributed.process_count() > 1


def read_is_collective(array: jax.Array) -> bool:
    """Whether reading `array` to the host needs tiles only other processes hold: its
    read is then a collective every process must join (`gather`). A replicated array
    reads from a device of this process's own."""
    return not (array.is_fully_addressable or array.is_fully_replicated)


def meet_to_run() -> None:
    """Meet every process before a read runs its pending computation: with SPMD over
    several processes that program runs on all of their devices, so a read made by one
    process alone would launch it there and wait forever (jax aborts the process at exit).
    Raises `PeerTimeoutError` after the collective timeout, naming the missing processes."""
    distributed.barrier("spmd/run", what=_RUN)


def place(host: np.ndarray, sharding: Any) -> jax.Array:
    """A global array laid out as `sharding`, from the same host value in every process
    (each process fills only the shards its devices hold)."""
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def gather(array: jax.Array) -> np.ndarray:
    """The whole value of a global array that spans other processes' devices, on the
    host (from every process's shards), in an array of the caller's own. An array laid
    out by XLA's sharding (a program over meshes of several device orders) is gathered by
    a program for XLA's GSPMD partitioner: Shardy, jax's default, cannot name its layout."""
    from jax.experimental import multihost_utils

    # The tiles come by a collective every process must join: meet first, so that a read
    # made by one process alone fails after the collective timeout, naming the others.
    distributed.barrier("spmd/read", what=_READ)
    partitioner = (jax_config.use_shardy_partitioner(False)
                   if type(array.sharding) is GSPMDSharding else contextlib.nullcontext())
    with partitioner:
        host = np.asarray(multihost_utils.process_allgather(array, tiled=True))
    return host if host.flags.writeable else host.copy()


_ALL_READ = ("every process must read the same tensors in the same order, e.g. "
             "`t.cpu()`, `t.item()` or `print(t)` outside `if xr.process_index() == 0:`")
_READ = ("a read of a tensor sharded over several processes' devices (a collective: "
         f"{_ALL_READ})")
_RUN = ("a read of a pending tensor, whose computation is one program over every "
        f"process's devices ({_ALL_READ})")


def put(array: jax.Array, sharding: Any) -> jax.Array:
    """`array` laid out as `sharding` (`jax.device_put`), also when it is laid out by XLA's
    sharding over other processes' devices too (an output of a program over meshes of
    several device orders): `jax.device_put` moves such an array only from a mesh's
    layout, so it is renumbered in `sharding`'s device order (no copy) and moved by a
    program for XLA's GSPMD partitioner, the one that reads its layout."""
    if type(array.sharding) is not GSPMDSharding or array.is_fully_addressable:
        return jax.device_put(array, sharding)
    with jax_config.use_shardy_partitioner(False):
        return _moved(sharding)(in_order(array, order(sharding)))


@functools.lru_cache(maxsize=64)
def _moved(sharding: Any) -> Any:
    """A program that lays its input out as `sharding` (XLA's partitioner moves the data)."""
    return jax.jit(lambda x: x, out_shardings=sharding)


def on_devices(arrays: Sequence[jax.Array], devices: tuple) -> list[jax.Array]:
    """`arrays`, each laid out over `devices`, in one device order: data made on one
    device before SPMD was turned on (or a scalar cached then) is replicated, once. When
    the sharded inputs lie on one mesh, replicated data is re-expressed on it (no copy:
    each device keeps its whole value), since jax names a program's output layouts on
    one mesh; inputs of meshes that order the devices differently are laid out in the
    order of `devices` (`in_order`, no copy either)."""
    out = list(arrays)
    count = len(devices)
    meshes: dict[int, Any] = {}  # the sharded inputs' meshes
    layouts: dict[int, Any] = {}  # one sharding per mesh, and XLA's shardings: their orders
    named = True  # no input laid out by XLA's sharding (whose programs name no mesh)
    last = None  # the mesh of the input before: most inputs share one (a dict op less)
    for k, array in enumerate(out):
        sharding = array.sharding
        kind = type(sharding)
        if kind is SingleDeviceSharding:
            if count == 1:
                continue
            out[k] = array = jax.device_put(array, replicated(devices))
            sharding, kind = array.sharding, NamedSharding
        if kind is NamedSharding:
            mesh = sharding.mesh
            if mesh is not last:
                layouts.setdefault(id(mesh), sharding)
                last = mesh
            if not _whole(sharding):
                meshes.setdefault(id(mesh), mesh)
        else:
            named = False
            layouts.setdefault(id(sharding), sharding)
    if len(meshes) == 1 and named:
        (mesh,) = meshes.values()
        for k, array in enumerate(out):
            sharding = array.sharding
            if type(sharding) is NamedSharding and sharding.mesh is not mesh and _whole(sharding):
                out[k] = jax.device_put(array, NamedSharding(mesh, PartitionSpec()))
    orders = {key: order(sharding) for key, sharding in layouts.items()}
    if len(set(orders.values())) > 1:
        for k, array in enumerate(out):
            sharding = array.sharding
            key = id(sharding.mesh) if type(sharding) is NamedSharding else id(sharding)
            if orders[key] != devices:
                out[k] = in_order(array, devices)
    return out


def order(sharding: Any) -> tuple:
    """The devices of `sharding` in the order its tile assignment numbers them."""
    return tuple(sharding._device_assignment)


def in_order(array: jax.Array, devices: tuple) -> jax.Array:
    """`array` (over `devices` in another order, e.g. the mesh `xs.Mesh([3, 1, 2, 0],
    ...)`) as the same shards laid out by XLA's sharding over `devices` in their order:
    no data moves, each device keeps its buffer. One program takes one device order, so
    a program reading tensors of meshes ordering the devices differently reads them so.
    Arrays of one device or already in that order are returned as they are."""
    sharding = array.sharding
    if len(sharding.device_set) == 1 or order(sharding) == devices:
        return array
    sharding = as_gspmd(sharding, array.ndim, devices)
    shards = {shard.device: shard.data for shard in array.addressable_shards}
    return jax.make_array_from_single_device_arrays(
        array.shape, sharding, [shards[d] for d in sharding._addressable_device_assignment])


def _whole(sharding: NamedSharding) -> bool:
    """Whether every device holds the whole array (a spec naming no mesh axis)."""
    return all(entry is None for entry in sharding.spec)


def mixed_layouts(arrays: Sequence[jax.Array]) -> bool:
    """Whether a program over `arrays` is compiled with its layouts given as XLA's own
    (`gspmd_layouts`): its sharded inputs lie on more than one mesh, or come from such a
    program. jax names a program's output layouts on the mesh of its first input laid out
    on a mesh, and fails at compile when a layout XLA's partitioner chose for an output
    cannot be written on that mesh (an output tiled in 2 and replicated in 2, where that
    mesh is one axis of 4 devices: weights on a 2x2 mesh, the batch on a 4x1 one)."""
    meshes = set()
    for array in arrays:
        sharding = array.sharding
        if type(sharding) is GSPMDSharding:
            return True
        if type(sharding) is NamedSharding and not _whole(sharding):
            meshes.add(sharding.mesh)
    return len(meshes) > 1


_gspmd = threading.local()


@contextlib.contextmanager
def gspmd_layouts(devices: tuple | None) -> Iterator[None]:
    """Within it, the sharding constraints lowered into a program name their layouts as
    XLA's over `devices`, the program's device order (None: each its own; `constraint`);
    the compiler gives the inputs' layouts so too (`as_gspmd`). A program lowered so
    names no mesh, and its outputs keep the layouts XLA chose."""
    _gspmd.on, _gspmd.devices = True, devices
    try:
        yield
    finally:
        _gspmd.on, _gspmd.devices = False, None


@functools.lru_cache(maxsize=256)
def as_gspmd(sharding: Any, ndim: int, devices: tuple | None = None) -> GSPMDSharding:
    """`sharding` of an array of `ndim` dims as XLA's sharding over the same devices,
    numbered in the order of `devices` (by default its own): each device gets the same
    tile as before."""
    own = order(sharding)
    if devices is None or own == devices:
        if type(sharding) is GSPMDSharding:
            return sharding
        return GSPMDSharding(own, sharding._to_xla_hlo_sharding(ndim),
                             memory_kind=sharding.memory_kind)
    if set(own) != set(devices):
        raise ValueError(
            f"A sharding over the devices {sorted(d.id for d in own)} cannot join a program "
            f"over {sorted(d.id for d in devices)}: SPMD meshes span every device of the "
            "job.")
    return GSPMDSharding(devices, _renumbered(sharding._to_xla_hlo_sharding(ndim), own,
                                              devices), memory_kind=sharding.memory_kind)


def _renumbered(hlo: Any, own: tuple, devices: tuple) -> Any:
    """XLA's sharding `hlo`, whose tile assignment numbers devices by their place in
    `own`, numbering them by their place in `devices` instead."""
    if hlo.is_replicated() or hlo.is_manual():
        return hlo  # names no device
    place = {device: k for k, device in enumerate(devices)}
    proto = hlo.to_proto()
    renumbered = xla_client.OpSharding()
    renumbered.type = proto.type
    renumbered.tile_assignment_dimensions = list(proto.tile_assignment_dimensions)
    renumbered.tile_assignment_devices = [place[own[k]] for k in hlo.tile_assignment_devices()]
    renumbered.replicate_on_last_tile_dim = proto.replicate_on_last_tile_dim
    renumbered.last_tile_dims = list(proto.last_tile_dims)
    return xla_client.HloSharding.from_proto(renumbered)


def constraint(sharding: Any, ndim: int) -> Any:
    """The sharding a constraint of `ndim` dims is lowered with: `sharding`, or its XLA
    form over the program's devices within `gspmd_layouts()`."""
    if not getattr(_gspmd, "on", False):
        return sharding
    return as_gspmd(sharding, ndim, _gspmd.devices)


def layout_key(arrays: Sequence[jax.Array]) -> tuple:
    """What a compiled program's inputs fix beyond shapes: their shardings."""
    return tuple([a.sharding for a in arrays])


def sharding_text(sharding: Any, ndim: int, global_devices: Sequence[Any]) -> str:
    """PyTorch/XLA's text for `sharding` (XLA's HloSharding with every device id written
    out as the device's global ordinal): `{replicated}`, `{devices=[2,1]0,1}`,
    `{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}`, `{manual}`."""
    hlo = sharding._to_xla_hlo_sharding(ndim)
    if hlo.is_replicated():
        return "{replicated}"
    if hlo.is_manual():
        return "{manual}"
    assignment = list(sharding._device_assignment)
    ordinal = {d: i for i, d in enumerate(global_devices)}
    if hlo.is_tiled() or hlo.replicate_on_last_tile_dim():
        dims = list(hlo.tile_assignment_dimensions())
        ids = [ordinal[assignment[i]] for i in hlo.tile_assignment_devices()]
        text = f"{{devices=[{','.join(map(str, dims))}]{','.join(map(str, ids))}"
        if hlo.replicate_on_last_tile_dim():
            text += " last_tile_dim_replicate"
        return text + "}"
    return str(hlo)


def iota_devices(shape: Sequence[int], perm: Sequence[int] | None = None) -> list[int]:
    """The device ids XLA's iota tile assignment `<=[shape]T(perm)` lists: 0..n-1 laid out
    as `shape`, transposed by `perm`, read in order."""
    iota = np.arange(int(np.prod(shape))).reshape(tuple(shape))
    if perm:
        iota = iota.transpose(tuple(perm))
    return iota.reshape(-1).tolist()


_IOTA = re.compile(r"(devices=\[[\d,]+\])<=\[([\d,]+)\](?:T\(([\d,]+)\))?")


def explicit_device_lists(text: str) -> str:
    """`text` with XLA's iota tile assignments (`devices=[2,2]<=[4]`) written out as the
    device lists PyTorch/XLA prints (`devices=[2,2]0,1,2,3`)."""

    def written(match: re.Match) -> str:
        shape = [int(d) for d in match.group(2).split(",")]
        perm = [int(a) for a in match.group(3).split(",")] if match.group(3) else None
        return match.group(1) + ",".join(map(str, iota_devices(shape, perm)))

    return _IOTA.sub(written, text)
