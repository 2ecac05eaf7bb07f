"""`torch_xla.distributed.xla_multiprocessing` (xmp): one process per device.

    def _mp_fn(index, lr):
        device = xm.xla_device()       # this process's own device
        ...                            # xm.optimizer_step averages gradients
    xmp.spawn(_mp_fn, args=(0.1,))

`spawn` starts one process per device of the active plugin (its
`physical_chip_count()`), or `nprocs` of them. Each child configures its plugin
for its rank, joins the job's coordinator (hosted by process 0 on a free local
port) and calls `fn(global_ordinal, *args)`. If any process fails, the others
are stopped and `spawn` raises with the failed process's traceback; otherwise it
returns `{ordinal: fn's return value}`.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import socket
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from torch_xla.pjrt import distributed
from torch_xla.plugins import registry


class ProcessFailedError(RuntimeError):
    """A spawned process raised or died; the message carries its traceback or exit code."""


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
    report: multiprocessing.connection.Connection,
) -> None:
    _exit_with_parent()
    os.environ.update(env)
    os.environ[distributed.LOCAL_RANK_ENV] = str(rank)
    os.environ[distributed.LOCAL_COUNT_ENV] = str(count)
    try:
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        result = fn(xr.global_ordinal(), *args)
        xm.wait_device_ops()
        # Plain pickle, not multiprocessing's: tensors travel by value, not as shared
        # memory that would vanish with this process.
        try:
            message = pickle.dumps(("ok", result))
        except (pickle.PicklingError, TypeError, AttributeError):
            message = pickle.dumps(("ok", None))  # the return value cannot cross processes
        report.send_bytes(message)
    except BaseException as error:  # noqa: BLE001 - reported to the parent, then re-raised
        text = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
        report.send_bytes(pickle.dumps(("error", text)))
        raise SystemExit(1) from None
    finally:
        report.close()


def _exit_with_parent() -> None:
    """End this child if the spawning process dies (it would otherwise wait in a collective)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="xmp-parent-watch", daemon=True).start()


class SpawnContext:
    """The running processes of one `spawn`; `join()` waits and returns their results."""

    def __init__(self, processes: list, reports: list) -> None:
        self.processes = processes
        self._reports = reports

    def join(self) -> dict[int, Any]:
        results: dict[int, Any] = {}
        owner: dict[Any, int] = {}  # each process's report pipe and exit sentinel -> its rank
        for rank, (conn, process) in enumerate(zip(self._reports, self.processes, strict=True)):
            owner[conn] = owner[process.sentinel] = rank
        try:
            while len(results) < len(self.processes):
                ready = multiprocessing.connection.wait(
                    [waitable for waitable, rank in owner.items() if rank not in results]
                )
                for item in ready:
                    rank = owner[item]
                    if rank in results:
                        continue
                    conn = self._reports[rank]
                    if conn.poll():
                        status, value = pickle.loads(conn.recv_bytes())
                        if status == "error":
                            raise ProcessFailedError(
                                f"Process {rank} of xmp.spawn failed:\n{value}"
                            )
                        results[rank] = value
                        continue
                    process = self.processes[rank]
                    process.join(timeout=1)
                    if process.exitcode is not None:
                        raise ProcessFailedError(
                            f"Process {rank} of xmp.spawn exited with code {process.exitcode} "
                            "before returning (killed, out of memory, or os._exit)."
                        )
            for process in self.processes:
                process.join()
            return results
        finally:
            self._stop()

    def _stop(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()


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
    context = multiprocessing.get_context(start_method)
    processes, reports = [], []
    for rank in range(count):
        receive, send = context.Pipe(duplex=False)
        process = context.Process(
            target=_child, args=(rank, count, env, fn, tuple(args), send),
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
