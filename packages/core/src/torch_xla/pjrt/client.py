"""The one PJRT client of this process, built from the active plugin.

Everything that touches devices goes through `client()`: device lists,
host<->device transfers and compilation. The client is created lazily, the
first time something needs a device, after the plugin has configured the
process; from then on the device type is fixed.

The runtime's metrics are PyTorch/XLA's: `TransferToDeviceTime` and
`OutboundData` (bytes) per host-to-device copy, `TransferFromDeviceTime` and
`InboundData` per copy back (`ReplicateShardedData` when a sharded value is gathered
for it), `CreateDataHandles` per device buffer made (copies
and execution results), `CompileTime` (or `EagerOpCompileTime`) and
`CreateCompileHandles` per compilation, and `ExecuteTime` (or
`EagerOpExecuteTime`) from an execution's launch until its results are ready,
measured by `ExecutionClock` without making the launching thread wait.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax._src.lib import xla_client
from jax._src.sharding import IndivisibleError
from jax.profiler import TraceAnnotation

from torch_xla import _metrics
from torch_xla.pjrt import cache as compile_cache
from torch_xla.pjrt import distributed, spmd
from torch_xla.plugins import registry
from torch_xla.plugins.base import DevicePlugin

# Trace events of the runtime (see torch_xla.debug.profiler), named as PyTorch/XLA's
# runtime names them so that a profile reads the same and tools find them.
TRACE_TRANSFER_TO_DEVICE = "PjRtComputationClient::TransferToDevice"
TRACE_TRANSFER_FROM_DEVICE = "PjRtComputationClient::TransferFromDevice"
TRACE_COMPILE = "PjRtComputationClient::Compile"
TRACE_EXECUTE = "PjRtComputationClient::ExecuteComputation"


def host_copy(array: jax.Array, fetch_copies: bool) -> np.ndarray:
    """The value of a fully addressable or fully replicated `array` in a NumPy array of
    the caller's own.

    `fetch_copies`: the platform's fetch copies device memory to the host (every
    platform but the CPU, whose fetch aliases it). jax keeps such a copy on the array it
    fetched, for as long as that array lives (and, on any platform, the value that
    `np.asarray` assembles from shards): a transfer of a model's parameters to the host
    (`xm.save`, `state_dict` to the CPU, `local_shards`) would leave a second copy of
    them in host memory until the next step replaced them (seen on an H200: 64 MB kept
    per 64 MB tensor read). There each shard is fetched through a fresh array over the
    same device buffer (no device copy), which takes the cached copy with it; the fresh
    array costs about 25 us, so the CPU fetches directly. A fully replicated `array` that
    spans other processes' devices too reads from one of this process's devices."""
    if array.is_fully_replicated:
        single = (_fresh(array.addressable_shards[0])
                  if fetch_copies or not array.is_fully_addressable else array)
        return _owned(*_fetch(single))
    host = np.empty(array.shape, array.dtype)
    for shard in array.addressable_shards:
        if shard.replica_id == 0:
            host[shard.index] = _fetch(_fresh(shard) if fetch_copies else shard.data)[0]
    return host


def _fresh(shard: Any) -> jax.Array:
    """A new array over `shard`'s device buffer."""
    return jax.make_array_from_single_device_arrays(
        shard.data.shape, jax.sharding.SingleDeviceSharding(shard.device), [shard.data])


def _fetch(array: jax.Array) -> tuple[np.ndarray, bool]:
    """(the host value of a single-device or replicated `array`, whether it is a copy)."""
    fetch = getattr(array, "_single_device_array_to_np_array_did_copy", None)
    if fetch is None:  # a jax without the fetch that tells: taken as aliasing
        return np.asarray(array), False
    return fetch()


def _owned(host: np.ndarray, copied: bool) -> np.ndarray:
    if not copied:
        return np.array(host, copy=True)
    if not host.flags.writeable:  # jax marks its copy read-only; nothing else holds it now
        try:
            host.flags.writeable = True
        except ValueError:  # NumPy keeps the flag where it cannot see whose memory it is
            host = np.array(host, copy=True)
    return host


def _lowered(fn: Callable[..., Any], args: tuple, options: dict, gspmd: bool) -> Any:
    """`fn` jitted with `options` and lowered for `args`; `gspmd`: with every layout given
    as XLA's over the inputs' device order (`spmd.gspmd_layouts`), so that jax keeps the
    layouts XLA's partitioner chooses for the outputs instead of naming them on one
    input's mesh, and constraints on meshes ordering the devices otherwise join in."""
    if gspmd:
        devices = _device_order(args)
        options = dict(options, in_shardings=tuple(
            [spmd.as_gspmd(a.sharding, a.ndim, devices) for a in args]))
        wanted = options.get("out_shardings")
        if wanted is not None:  # as XLA's too: jax would name the others on their mesh
            outs = jax.eval_shape(fn, *args)
            options["out_shardings"] = tuple(
                [None if s is None else spmd.as_gspmd(s, len(o.shape), devices)
                 for s, o in zip(wanted, outs, strict=True)])
        fn = functools.partial(fn)  # traced anew: jax keeps traces per function
    jitted = jax.jit(fn, **options)
    with spmd.gspmd_layouts(devices) if gspmd else contextlib.nullcontext():
        return jitted.lower(*args)


def _device_order(args: tuple) -> tuple | None:
    """The device order of a program over `args` (placed by `spmd.on_devices`, so that
    those over several devices share one): theirs, or None when none has several."""
    for a in args:
        if len(a.sharding.device_set) > 1:
            return spmd.order(a.sharding)
    return None


def _needs_xla_layouts(error: Exception) -> bool:
    """Whether jax refused an SPMD program's lowering for what lowering it with XLA's
    layouts (`_lowered(..., gspmd=True)`) allows: a constraint on a mesh of another shape
    than the inputs' (an output layout that mesh cannot name), or on devices ordered
    otherwise than the inputs'."""
    return isinstance(error, IndivisibleError) or "incompatible devices" in str(error)


class XlaRuntimeError(RuntimeError):
    """The runtime cannot do what was asked; the message says why and what to do."""


class Client:
    """Devices, transfers and compilation for one plugin, over jax's PJRT client."""

    def __init__(self, name: str, plugin: DevicePlugin) -> None:
        self.name = name  # canonical device type, e.g. "CPU"
        self.plugin = plugin
        self.platform = _configure_platform(name, plugin)
        try:
            self.devices: list[jax.Device] = jax.local_devices(backend=self.platform)
            self.global_devices: list[jax.Device] = jax.devices(self.platform)
        except Exception as error:
            reason = f"{type(error).__name__}: {error}"
            if isinstance(error, AssertionError) or not str(error).strip():
                reason = f"jax created no backend for platform {self.platform!r} ({reason})"
            raise XlaRuntimeError(
                f"The {name} plugin ({plugin!r}) could not create its PJRT client: {reason}. "
                "Check that the device is present and its driver works, or choose another "
                "device with PJRT_DEVICE."
            ) from error
        self.compiled_once = False
        self._memory_limits: dict[int, int | None] = {}
        if spmd.requested():
            spmd.enable()

    # --- topology -----------------------------------------------------------

    def device(self, index: int) -> jax.Device:
        if not 0 <= index < len(self.devices):
            raise XlaRuntimeError(
                f"xla:{index} does not exist: this process has {len(self.devices)} "
                f"{self.name} device(s), xla:0 to xla:{len(self.devices) - 1}."
            )
        return self.devices[index]

    def device_count(self) -> int:
        """The `xla:N` devices this process drives: one (the virtual device) in SPMD mode."""
        return 1 if spmd.enabled() else len(self.devices)

    def global_device_count(self) -> int:
        """The `xla:N` devices of the job: one in SPMD mode."""
        return 1 if spmd.enabled() else len(self.global_devices)

    def replicated(self) -> Any:
        """The virtual device's layout of unsharded data: whole on every device of the job."""
        return spmd.replicated(tuple(self.global_devices))

    def memory_limit(self, index: int) -> int | None:
        """The bytes of memory device `index` has (the host's for the CPU platform), or
        None when its plugin reports none."""
        limits = self._memory_limits
        if index not in limits:
            stats = self.device(index).memory_stats() or {}
            limit = stats.get("bytes_limit")
            if not limit and self.platform == "cpu":
                limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            limits[index] = int(limit) if limit else None
        return limits[index]

    def process_index(self) -> int:
        return jax.process_index(backend=self.platform)

    def process_count(self) -> int:
        return jax.process_count(backend=self.platform)

    # --- transfers ----------------------------------------------------------

    def to_device(self, array: np.ndarray, index: int = 0, layout: Any = None,
                  local: bool = False) -> jax.Array:
        """`array` on device `index`; in SPMD mode a global array laid out as `layout`
        (replicated by default), `local`: `array` is only this process's part of it."""
        start = time.perf_counter()
        with TraceAnnotation(TRACE_TRANSFER_TO_DEVICE):
            if local:
                moved = jax.make_array_from_process_local_data(layout, array)
            elif spmd.enabled():
                moved = spmd.place(array, self.replicated() if layout is None else layout)
            else:
                moved = jax.device_put(array, self.device(index))
        _TO_DEVICE_TIME.add(time.perf_counter() - start)
        _OUTBOUND.add(array.nbytes)
        _DATA_HANDLES.value += 1
        return moved

    def to_host(self, array: jax.Array) -> np.ndarray:
        """`array`'s value in a NumPy array of the caller's own, aliasing no device buffer
        and leaving no copy behind on `array` (`host_copy`)."""
        start = time.perf_counter()
        if not array.sharding.is_fully_replicated:
            _REPLICATE_SHARDED.inc()  # its tiles are gathered into one value first
        with TraceAnnotation(TRACE_TRANSFER_FROM_DEVICE):
            host = (spmd.gather(array) if spmd.read_is_collective(array)
                    else host_copy(array, self.platform != "cpu"))
        _FROM_DEVICE_TIME.add(time.perf_counter() - start)
        _INBOUND.add(host.nbytes)
        return host

    # --- compilation --------------------------------------------------------

    def compile(self, key: str | None, fn: Callable[..., Any], *args: Any,
                eager: bool = False, out_shardings: Any = None, donate: tuple = ()) -> Any:
        """Compile `fn` for `args`; with a persistent cache, `key` names the entry.

        `eager`: one op compiled in eager mode, timed as `EagerOpCompileTime`.
        `out_shardings`: the results' layouts (by default XLA's partitioner chooses them
        from the inputs' shardings and the graph's constraints).
        `donate`: the positions of the arguments whose buffers the program takes over
        (`jax.jit`'s `donate_argnums`); `key` must name them."""
        with TraceAnnotation(TRACE_COMPILE):
            return self._compile(key, fn, *args, eager=eager, out_shardings=out_shardings,
                                 donate=donate)

    def _compile(self, key: str | None, fn: Callable[..., Any], *args: Any,
                 eager: bool = False, out_shardings: Any = None, donate: tuple = ()) -> Any:
        self.compiled_once = True
        cached = compile_cache.load(key) if key is not None else None
        if cached is not None:
            return cached
        start = time.perf_counter()
        options: dict[str, Any] = {"donate_argnums": tuple(donate)} if donate else {}
        if out_shardings is not None:
            options["out_shardings"] = out_shardings
        mixed = spmd.enabled() and spmd.mixed_layouts(args)
        try:
            compiled = _lowered(fn, args, options, mixed).compile()
        except ValueError as e:  # IndivisibleError is one
            if mixed or not spmd.enabled() or not _needs_xla_layouts(e):
                raise
            compiled = _lowered(fn, args, options, True).compile()
        _metrics.metric("EagerOpCompileTime" if eager else "CompileTime").add(
            time.perf_counter() - start)
        _metrics.counter("CreateCompileHandles").inc()
        if key is not None:
            compile_cache.store(key, compiled)
        return compiled

    def compile_stablehlo(self, module: bytes | str, index: int = 0) -> Any:
        """A StableHLO module (bytecode or text: a saved export bundle's function) compiled
        for device `index`. Its `main` takes and returns arrays in order."""
        start = time.perf_counter()
        device = self.device(index)
        with TraceAnnotation(TRACE_COMPILE):
            executable = device.client.compile_and_load(
                module, xla_client.DeviceList((device,)), xla_client.CompileOptions())
        _metrics.metric("CompileTime").add(time.perf_counter() - start)
        _metrics.counter("CreateCompileHandles").inc()
        return executable

    def run_stablehlo(self, executable: Any, arrays: list[jax.Array]) -> list[jax.Array]:
        """Run a `compile_stablehlo` executable on arrays of its device."""
        start = time.perf_counter()
        results = [r[0] for r in executable.execute_sharded(arrays)
                   .disassemble_into_single_device_arrays()]
        self.launched(results, start)
        self.check_executions()
        return results

    # --- execution ----------------------------------------------------------

    def launched(self, results: Any, start: float, eager: bool = False) -> None:
        """An execution launched at `start` (perf_counter) returned `results`, maybe not
        ready yet: count its buffers, and time it until they are ready."""
        _DATA_HANDLES.value += len(results)
        metric = _EAGER_EXECUTE_TIME if eager else _EXECUTE_TIME
        if spmd.enabled():  # one program over every device, as PyTorch/XLA names it
            metric = _EXECUTE_REPLICATED_TIME
        execution_clock.launched(metric, start, results)

    def on_ready(self, array: jax.Array, callback: Callable[[], Any]) -> None:
        """Call `callback()` once `array` holds its value (PJRT's on-ready callback, which
        jax does not expose): on a thread of its own, which waits for the array and then
        calls it, also when the computation failed (the error reaches whoever reads the
        array). The thread holds `array` until then."""

        def wait() -> None:
            try:
                jax.block_until_ready(array)
            except Exception:  # noqa: BLE001 - as above
                pass
            callback()

        threading.Thread(target=wait, name="xla-on-ready", daemon=True).start()

    def check_executions(self) -> None:
        """The launcher has wrapped its results: record the executions already done (the
        rest are timed until ready on the clock's thread). Every caller of `launched`
        calls it once that is done."""
        execution_clock.check()


class ExecutionClock:
    """Times executions from launch until their results are ready, without making the
    launching thread wait (PyTorch/XLA times them with an on-ready callback of the PJRT
    future, which jax does not expose).

    A launch is only noted. Its launcher calls `check()` once it has wrapped the results
    (a sync, a call of a compiled dynamo graph): an execution already done by then is
    recorded there, its time read at that moment (so at most the wrapping too long); the
    others are handed to a thread of the clock's own, which waits for each and records it
    when it is ready. Small programs, done in microseconds, so never wake that thread:
    waking it and handing the GIL back and forth cost 45 to 90 us per execution on a
    2-core host, a quarter of a cached `torch.compile` training call (docs/design.md).
    `settle(wait=True)` returns once every launched execution has its sample; metrics
    readers call it through `_metrics.settle`."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._done = threading.Condition()
        self._in_flight = 0  # handed to the thread, not recorded yet
        self._thread: threading.Thread | None = None
        self._unchecked: list[tuple[_metrics.Metric, float, Any]] = []
        self._lock = threading.Lock()

    def launched(self, metric: _metrics.Metric, start: float, results: Any) -> None:
        with self._lock:
            self._unchecked.append((metric, start, results))

    def check(self) -> None:
        """Record the noted executions that are done; hand the others to the thread."""
        with self._lock:
            items, self._unchecked = self._unchecked, []
        if not items:
            return
        now = time.perf_counter()
        for item in items:
            metric, start, results = item
            # one execution's results become ready together: its last one stands for all
            if not results or _done(results[-1]):
                metric.add(now - start)
            else:
                self._wait_for(item)

    def _wait_for(self, item: tuple[_metrics.Metric, float, Any]) -> None:
        with self._done:
            self._in_flight += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="xla-execution-clock",
                                                daemon=True)
                self._thread.start()
        self._queue.put(item)

    def settle(self, wait: bool) -> None:
        self.check()
        if not wait:
            return  # the clock thread records each execution as soon as it finishes
        with self._done:
            while self._in_flight:
                self._done.wait()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)

    def reset_after_fork(self) -> None:
        """A forked child has no clock thread and nothing in flight."""
        self.__init__()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            metric, start, results = item
            try:
                jax.block_until_ready(results)
            except Exception:  # noqa: BLE001 - the error reaches whoever reads the results
                pass
            metric.add(time.perf_counter() - start)
            del item, results  # the buffers must not outlive their tensors here
            with self._done:
                self._in_flight -= 1
                self._done.notify_all()


def _done(array: Any) -> bool:
    """Whether `array`'s execution has finished; a buffer another program already took
    over (donation, from another thread) counts as finished: so did its execution."""
    try:
        return array.is_ready()
    except RuntimeError:  # jax: "Array has been deleted"
        return True


_TO_DEVICE_TIME = _metrics.metric("TransferToDeviceTime")
_FROM_DEVICE_TIME = _metrics.metric("TransferFromDeviceTime")
_REPLICATE_SHARDED = _metrics.counter("ReplicateShardedData")
_OUTBOUND = _metrics.metric("OutboundData")
_INBOUND = _metrics.metric("InboundData")
_DATA_HANDLES = _metrics.counter("CreateDataHandles")
_EXECUTE_TIME = _metrics.metric("ExecuteTime")
_EAGER_EXECUTE_TIME = _metrics.metric("EagerOpExecuteTime")
_EXECUTE_REPLICATED_TIME = _metrics.metric("ExecuteReplicatedTime")

execution_clock = ExecutionClock()
_metrics.on_read(execution_clock.settle)
atexit.register(execution_clock.stop)
os.register_at_fork(after_in_child=execution_clock.reset_after_fork)


def _configure_platform(name: str, plugin: DevicePlugin) -> str:
    """Run the plugin's process set-up and make jax use only its platform."""
    if not plugin.hardware_present():
        raise XlaRuntimeError(
            f"The {name} plugin ({plugin!r}) found no {name} hardware on this host "
            f"(physical_chip_count() = {plugin.physical_chip_count()}). Run on a machine "
            "with that device, or choose another device with PJRT_DEVICE "
            "(`torch-xla plugins` lists what is installed and present)."
        )
    where = distributed.topology()
    if where is not None:
        plugin.configure_multiprocess(where.local_rank, where.local_count)
    else:
        plugin.configure_single_process()
    library = plugin.library_path()
    if library is not None:
        platform = name.lower()
        if not os.path.isfile(library):
            raise XlaRuntimeError(
                f"The {name} plugin ({plugin!r}) names the PJRT library {library!r}, "
                "which does not exist. Reinstall the plugin package or fix the path it reads."
            )
        plugin.register_library(platform, library, plugin.client_create_options())
    else:
        platform = plugin.jax_platform()
        if platform is None:
            raise XlaRuntimeError(
                f"The {name} plugin ({plugin!r}) returned no library_path() and no "
                "jax_platform(); a plugin must name one of them."
            )
    # Only the chosen platform initialises: other installed PJRT packages
    # must not probe for hardware that this process does not use.
    jax.config.update("jax_platforms", platform)
    jax.config.update("jax_enable_x64", True)  # torch's int64/float64 need it
    if where is not None and where.count > 1 and plugin.requires_xla_coordinator():
        distributed.join(where)  # before the backend exists: it then sees the whole job
    return platform


_client: Client | None = None
_lock = threading.Lock()
# Called with the client right after it is created: layers above the runtime
# apply the active plugin's policies here without the runtime importing them.
_start_callbacks: list[Callable[[Client], None]] = []


def on_start(callback: Callable[[Client], None]) -> None:
    """Call `callback(client)` when the client starts (at once if it has)."""
    _start_callbacks.append(callback)
    if _client is not None:
        callback(_client)


def client() -> Client:
    """The process's client, created from the active plugin on first use."""
    global _client
    if _client is None:
        with _lock:
            if _client is None:
                chosen = registry.active()
                assert chosen.plugin is not None
                started_client = Client(chosen.name, chosen.plugin)
                for callback in _start_callbacks:
                    callback(started_client)
                _client = started_client
    return _client


def started() -> Client | None:
    """The client if it exists, without creating it."""
    return _client
