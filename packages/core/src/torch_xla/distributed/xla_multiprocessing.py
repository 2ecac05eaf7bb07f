"""`torch_xla.distributed.xla_multiprocessing` (xmp): one process per device.

    def _mp_fn(index, lr):
        device = xm.xla_device()       # this process's own device
        ...                            # xm.optimizer_step averages gradients
    xmp.spawn(_mp_fn, args=(0.1,))

`spawn` starts one process per chip of the active plugin (its
`physical_chip_count()`), or `nprocs` of them. Each child configures its plugin
for its rank, joins the job's coordinator (hosted by process 0 on a free local
port) and calls `fn(global_ordinal, *args)`. A plugin whose processes drive
several devices each (`devices_per_process()`, e.g. the CPU plugin with
CPU_DEVICES_PER_PROCESS) gets one thread per device in each process, each thread
calling `fn` with its own device's ordinal. If any process raises, exits or is
killed before returning, the others are stopped and `spawn` raises
`ProcessFailedError` naming that process with its traceback, exit code or signal;
otherwise it returns `{ordinal: fn's return value}`.

With start_method="spawn" (the default) the children come from a fork server that
imported torch, jax and torch_xla once (multiprocessing's "forkserver" with those
modules preloaded): a child starts in well under a second where a fresh interpreter
spends several seconds of CPU importing them. Each child still starts clean (no
runtime, no state of the parent's), re-imports the parent's main module as spawn does,
and writes to the parent's current stdout and stderr. The server is started again
when the parent's environment changed since it started, so a child sees the same
variables a spawned one would.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import multiprocessing.reduction
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any

from torch_xla.pjrt import distributed, threads
from torch_xla.plugins import registry

# How long the parent waits for a failed child to finish exiting, so it can name the exit code.
_EXIT_GRACE_S = 5.0
# How long stopped children get between SIGTERM and SIGKILL. Short: once a child has joined
# the coordinator, jax's preemption notifier catches SIGTERM and the child goes on running.
_STOP_GRACE_S = 1.0


class ProcessFailedError(RuntimeError):
    """A spawned process raised or died before returning a result.

    `rank`: the failed process's index. `exit_code`: its exit code, negative for the
    signal that killed it, None if it had not exited when `spawn` stopped it.
    `child_traceback`: the exception `fn` raised in it, as text, or None if it died.
    """

    def __init__(
        self, message: str, rank: int | None = None, exit_code: int | None = None,
        child_traceback: str | None = None,
    ) -> None:
        super().__init__(message)
        self.rank = rank
        self.exit_code = exit_code
        self.child_traceback = child_traceback

    @property
    def signal_name(self) -> str | None:
        """The signal that killed the process (e.g. "SIGKILL"), or None."""
        if self.exit_code is None or self.exit_code >= 0:
            return None
        return _signal_name(-self.exit_code)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _how_it_ended(exit_code: int | None) -> str:
    if exit_code is None:
        return "was still running"
    if exit_code < 0:
        return f"was killed by {_signal_name(-exit_code)} (exit code {exit_code})"
    return f"exited with code {exit_code}"


def _likely_cause(exit_code: int | None) -> str:
    if exit_code == -signal.SIGKILL:
        return "out of memory, or killed by a user or the system"
    if exit_code is not None and exit_code < 0:
        return "a crash in native code, or a signal from outside"
    return "os._exit, or sys.exit outside fn, or a crash in native code"


def _died(rank: int, exit_code: int | None) -> ProcessFailedError:
    return ProcessFailedError(
        f"Process {rank} of xmp.spawn {_how_it_ended(exit_code)} before returning a result "
        f"({_likely_cause(exit_code)}).",
        rank, exit_code,
    )


def _raised(rank: int, exit_code: int | None, text: str) -> ProcessFailedError:
    return ProcessFailedError(
        f"Process {rank} of xmp.spawn raised, then {_how_it_ended(exit_code)}:\n{text}",
        rank, exit_code, text,
    )


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host if host != "localhost" else "127.0.0.1", 0))
        return s.getsockname()[1]


def _process_count(nprocs: int | None) -> int:
    active = registry.active()
    chips = active.plugin.physical_chip_count()
    if nprocs is None:
        if chips < 1:
            raise ValueError(f"The {active.name} plugin reports no device on this host; "
                             "there is nothing to spawn processes for.")
        return chips
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive integer or None, got {nprocs!r}")
    if nprocs > chips:
        hint = " (set CPU_NUM_DEVICES to allow more)" if active.name == "CPU" else ""
        raise ValueError(
            f"nprocs={nprocs}, but the {active.name} plugin reports {chips} device(s) on this "
            f"host{hint}; spawn at most one process per device, or pass nprocs=None."
        )
    return nprocs


def _child(
    rank: int, count: int, env: dict[str, str], fn: Callable, args: tuple,
    report: multiprocessing.connection.Connection, streams: None,
) -> None:
    """One spawned process. `streams` is None here: unpickling the parent's `_Streams` has
    already put its stdin, stdout and stderr in place."""
    _exit_with_parent()
    os.environ.update(env)
    os.environ[distributed.LOCAL_RANK_ENV] = str(rank)
    os.environ[distributed.LOCAL_COUNT_ENV] = str(count)
    try:
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        if registry.active().plugin.devices_per_process() > 1:
            _check_device_count(xr.addressable_device_count())
            status, result = "ok-threads", run_on_each_device(fn, args)
        else:
            status, result = "ok", _call(fn, xr.global_ordinal(), args)
        xm.wait_device_ops()
        # Plain pickle, not multiprocessing's: tensors travel by value, not as shared
        # memory that would vanish with this process.
        try:
            message = pickle.dumps((status, result))
        except (pickle.PicklingError, TypeError, AttributeError):
            # the return values cannot cross processes
            message = pickle.dumps((status, {k: None for k in result} if status == "ok-threads"
                                    else None))
        report.send_bytes(message)
    except BaseException as error:  # noqa: BLE001 - reported to the parent, then exit
        text = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
        report.send_bytes(pickle.dumps(("error", text)))
        _exit_now(_exit_code_for(error))
    finally:
        report.close()
    # Together with the others: process 0 hosts the coordinator, and leaving first would
    # abort the rest. A forked child exits without atexit handlers, jax's own leave included.
    distributed.leave()


def _call(fn: Callable, ordinal: int, args: tuple) -> Any:
    """`fn(ordinal, *args)`, where `sys.exit(0)` (or `sys.exit()`) is a normal end that
    returns None, as in PyTorch/XLA, whose example programs end `_mp_fn` with
    `sys.exit(0 if passed else 1)`; another exit code fails the job with that code."""
    try:
        return fn(ordinal, *args)
    except SystemExit as done:
        if done.code not in (None, 0):
            raise
        return None


def run_on_each_device(fn: Callable, args: tuple = ()) -> dict[int, Any]:
    """`fn(ordinal, *args)` in one thread per device of this process, each thread on its
    own device (its `torch_xla.device()`), as replicas; results by global ordinal."""
    import torch_xla.runtime as xr

    def on_my_device() -> tuple[int, Any]:
        ordinal = xr.global_ordinal()
        return ordinal, fn(ordinal, *args)

    count = xr.addressable_device_count()
    return dict(threads.run(on_my_device, range(count), distributed.collective_timeout))


def _check_device_count(count: int) -> None:
    active = registry.active()
    expected = active.plugin.devices_per_process()
    if count != expected:
        raise RuntimeError(
            f"The {active.name} plugin ({active.plugin!r}) declares {expected} devices per "
            f"process, but this process's client shows {count}; its configure_multiprocess() "
            "must give each spawned process exactly devices_per_process() devices."
        )


def _exit_code_for(error: BaseException) -> int:
    """sys.exit(n) in fn keeps its code n; any other exception exits with 1."""
    if isinstance(error, SystemExit) and isinstance(error.code, int):
        return error.code
    return 1


def _exit_now(code: int) -> None:
    """Leave without interpreter shutdown: jax's exit handler would wait for the peers (which
    the parent is about to stop) at the coordinator's shutdown barrier, then abort."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken by the user's code
            pass
    os._exit(code)


def _exit_with_parent() -> None:
    """End this child if the spawning process dies (it would otherwise wait in a collective).
    The parent's end of multiprocessing's pipe closes when it dies, whatever started the
    child (a fork server's child has the server, not the spawner, as its OS parent)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="xmp-parent-watch", daemon=True).start()


# What a child needs before it runs anything, imported once by the fork server (several
# seconds of CPU per child otherwise). torch_xla.core.xla_model brings the engine and the
# torch modules torch itself loads on the first op (torch._dynamo, torch.distributed.tensor).
_PRELOAD = ["torch", "jax", "torch_xla.core.xla_model"]
_server_started_with: tuple | None = None  # (environment, sys.path) of our fork server
_from_server: weakref.WeakSet = weakref.WeakSet()  # processes it started for us


def _context(start_method: str) -> multiprocessing.context.BaseContext:
    """The multiprocessing context for `start_method`: "spawn" becomes our fork server, as
    long as it can start children that a spawn would have started the same way."""
    if start_method != "spawn":
        return multiprocessing.get_context(start_method)
    if "forkserver" not in multiprocessing.get_all_start_methods():  # Windows
        return multiprocessing.get_context("spawn")
    global _server_started_with
    server = multiprocessing.forkserver._forkserver
    now = (dict(os.environ), tuple(sys.path))
    running = getattr(server, "_forkserver_pid", None) is not None
    if running and _server_started_with != now:
        # Started by someone else, or under other variables: its preloaded modules saw
        # another environment. Stop it, unless children of ours still use it.
        if (_server_started_with is None or any(p.is_alive() for p in _from_server)
                or not hasattr(server, "_stop")):
            return multiprocessing.get_context("spawn")
        server._stop()
        running = False
    if not running:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(_PRELOAD)
        _server_started_with = now
    return multiprocessing.get_context("forkserver")


class _Streams:
    """The parent's stdin, stdout and stderr, for a child of the fork server, which would
    otherwise write wherever the server's own streams pointed when it started (pickled
    while multiprocessing starts the child, when its descriptors can travel with it)."""

    def __reduce__(self) -> tuple:
        fds = [multiprocessing.reduction.DupFd(fd) if _is_open(fd) else None for fd in (0, 1, 2)]
        return _adopt_streams, tuple(fds)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _adopt_streams(*fds: Any) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    for target, fd in enumerate(fds):
        if fd is not None:
            received = fd.detach()
            os.dup2(received, target)
            os.close(received)


class SpawnContext:
    """The running processes of one `spawn`; `join()` waits and returns their results."""

    def __init__(self, processes: list, reports: list) -> None:
        self.processes = processes
        self._reports = reports

    def join(self) -> dict[int, Any]:
        """Every process's result by rank (by global ordinal, one per thread, where processes
        drive several devices); or stop them all and raise `ProcessFailedError`."""
        results: dict[int, Any] = {}
        waiting: dict[Any, int] = {}  # each process's report pipe and exit sentinel -> its rank
        for rank, (conn, process) in enumerate(zip(self._reports, self.processes, strict=True)):
            waiting[conn] = waiting[process.sentinel] = rank
        try:
            while waiting:
                ready = multiprocessing.connection.wait(list(waiting))
                failures = []
                for rank in sorted({waiting[item] for item in ready}):
                    kind, value = self._outcome(rank)
                    if kind == "failed":
                        failures.append(value)
                    elif kind == "returned":
                        results.update(value)
                        _forget(waiting, rank)
                    elif kind == "pipe closed":
                        del waiting[self._reports[rank]]  # only its exit is left to wait for
                if failures:
                    raise _first_cause(failures)
            for process in self.processes:
                process.join()
            return results
        finally:
            self._stop()

    def _outcome(self, rank: int) -> tuple[str, Any]:
        """What process `rank` has to say now: ("returned", value), ("failed", error),
        ("pipe closed", None) when it closed its pipe but lives on, or ("pending", None)."""
        conn, process = self._reports[rank], self.processes[rank]
        if not conn.poll():  # its exit sentinel is what became ready
            process.join(timeout=_EXIT_GRACE_S)
            return _failed_or(rank, process, "pending")
        try:
            status, value = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            # poll() is also true at the end of file: a dying child's end of the pipe can
            # close before its exit sentinel fires, so wait for the exit code instead.
            process.join(timeout=_EXIT_GRACE_S)
            return _failed_or(rank, process, "pipe closed")
        if status == "ok":
            return "returned", {rank: value}
        if status == "ok-threads":
            return "returned", value  # already by ordinal
        process.join(timeout=_EXIT_GRACE_S)
        return "failed", _raised(rank, process.exitcode, value)

    def _stop(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + _STOP_GRACE_S
        for process in self.processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()


def _failed_or(rank: int, process: Any, otherwise: str) -> tuple[str, Any]:
    if process.exitcode is None:
        return otherwise, None
    return "failed", _died(rank, process.exitcode)


def _forget(waiting: dict[Any, int], rank: int) -> None:
    for item in [item for item, owner in waiting.items() if owner == rank]:
        del waiting[item]


def _first_cause(failures: list[ProcessFailedError]) -> ProcessFailedError:
    """Of failures seen together, one that raised: a peer's death is more often the consequence
    (a process that exits takes the coordinator or a collective's partner with it)."""
    return next((f for f in failures if f.child_traceback is not None), failures[0])


def spawn(
    fn: Callable, args: tuple = (), nprocs: int | None = None, join: bool = True,
    daemon: bool = False, start_method: str = "spawn",
) -> dict[int, Any] | SpawnContext:
    """Run `fn(index, *args)` in one process per device; see the module docstring.

    `nprocs=1` runs `fn(0, *args)` in this process on one device, as PyTorch/XLA does.
    """
    if nprocs == 1:
        import torch_xla.runtime as xr

        return {0: fn(xr.global_ordinal(), *args)}
    count = _process_count(nprocs)
    if start_method == "fork":
        from torch_xla.pjrt.client import started

        if started() is not None:
            raise RuntimeError(
                "xmp.spawn(start_method='fork') after this process started its XLA runtime: "
                "a forked child cannot use it. Use start_method='spawn' (the default)."
            )
    host = os.environ.get("MASTER_ADDR", "localhost")
    env = {
        "PJRT_DEVICE": registry.active().name,
        distributed.COORDINATOR_ENV: (
            os.environ.get(distributed.COORDINATOR_ENV) or f"{host}:{_free_port(host)}"
        ),
        # For torch.distributed's store (init_method="xla://" or "env://").
        "MASTER_ADDR": host,
        "MASTER_PORT": os.environ.get("MASTER_PORT") or str(_free_port(host)),
    }
    context = _context(start_method)
    forked = context.get_start_method() == "forkserver"
    processes, reports = [], []
    for rank in range(count):
        receive, send = context.Pipe(duplex=False)
        process = context.Process(
            target=_child,
            args=(rank, count, env, fn, tuple(args), send, _Streams() if forked else None),
            daemon=daemon, name=f"xmp-{rank}",
        )
        try:
            process.start()
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            SpawnContext(processes, reports)._stop()
            raise TypeError(
                f"xmp.spawn could not send {fn!r} and its args to a new process ({error}); "
                "define the function at the top level of a module and pass picklable args."
            ) from error
        send.close()
        processes.append(process)
        if forked:
            _from_server.add(process)
        reports.append(receive)
    spawned = SpawnContext(processes, reports)
    return spawned.join() if join else spawned


class MpModelWrapper:
    """Kept for PyTorch/XLA scripts: wraps a model; `to(device)` moves it."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def to(self, device: Any) -> Any:
        return self._model.to(device)


class MpSerialExecutor:
    """Runs a function in one process of the host at a time (e.g. to download data once)."""

    def run(self, fn: Callable[[], Any]) -> Any:
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        result = None
        for turn in range(xr.local_process_count()):
            if turn == xr.local_ordinal():
                result = fn()
            xm.rendezvous(f"torch_xla.MpSerialExecutor.{turn}")
        return result
