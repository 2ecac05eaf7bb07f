"""Feeding batches to XLA devices in the background: `ParallelLoader` and `MpDeviceLoader`.

One thread reads the host data loader into a bounded host queue; per device,
transfer threads move batches to the device into a bounded device queue. The
training loop takes ready device batches, so reading and transfer overlap the
device's compute. Every `batches_per_execution` batches the loader calls
`xm.mark_step()`, which is why a loop over it needs no explicit step marker.
A loop that breaks out early leaves the threads to stop on their own; at the latest,
the interpreter's exit stops and joins them before the runtime shuts down.
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from torch_xla.core import xla_model as xm
from torch_xla.lazy import sharding

_END = object()  # no more batches
_POLL_SECONDS = 0.1  # how often a blocked worker checks whether the loader was closed
# At exit, how long to wait for each worker thread still running: one moving a batch ends
# once the copy is done; one blocked inside the user's host loader may never end.
_EXIT_JOIN_SECONDS = 30.0
_live: weakref.WeakSet = weakref.WeakSet()  # loaders whose worker threads may be running


class _Failure:
    """An exception raised by a worker, carried to the training loop."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def to_device(batch: Any, device: torch.device, input_sharding: Any = None) -> Any:
    """`batch` with every CPU tensor in it moved to `device` (nesting kept), as
    `xm.send_cpu_data_to_device` moves it: in SPMD mode laid out as `input_sharding` says
    (loaded already sharded), replicated where it says nothing."""
    moved = xm.send_cpu_data_to_device(batch, device, input_sharding)
    return moved[0] if type(batch) is torch.Tensor else moved


class _Channel:
    """A bounded queue whose blocking calls give up once the loader is closed."""

    def __init__(self, size: int, closed: threading.Event) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, size))
        self._closed = closed

    def put(self, item: Any) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def get(self) -> Any:
        while not self._closed.is_set():
            try:
                return self._queue.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                continue
        return _END


class PerDeviceLoader:
    """The batches of one device, already on it; iterate it in the training loop."""

    def __init__(self, parent: ParallelLoader, device: torch.device) -> None:
        self._parent = parent
        self._device = device
        self._yielded = 0

    def __iter__(self) -> PerDeviceLoader:
        return self

    def __len__(self) -> int:
        return self._parent.per_device_samples()

    def __next__(self) -> Any:
        item = self._parent.next_item(self._device)
        if item is _END:
            xm.mark_step()  # the last step's graph
            self._parent.close()
            raise StopIteration
        if self._yielded and self._yielded % self._parent.batches_per_execution == 0:
            xm.mark_step()
        self._yielded += 1
        return item

    def close(self) -> None:
        self._parent.close()

    def __del__(self) -> None:
        # A loop that breaks out early drops this iterator: let the workers end.
        self._parent.stop()


class ParallelLoader:
    """Loads `loader`'s batches onto `devices` in background threads.

    With several devices, consecutive batches go to the devices in turn and a
    last incomplete round is dropped, so every device runs the same number of
    steps.
    """

    def __init__(
        self,
        loader: Iterable,
        devices: list[torch.device | str],
        batchdim: int = 0,
        batches_per_execution: int = 1,
        loader_prefetch_size: int = 16,
        device_prefetch_size: int = 8,
        host_to_device_transfer_threads: int = 1,
        input_sharding: Any = None,
    ) -> None:
        if batches_per_execution < 1:
            raise ValueError(f"batches_per_execution must be >= 1, got {batches_per_execution}")
        if not devices:
            raise ValueError("ParallelLoader needs at least one device")
        if input_sharding is not None:
            sharding.check_spmd("ParallelLoader(input_sharding=...)")
        self._input_sharding = input_sharding
        self._loader = loader
        self._devices = [torch.device(d) for d in devices]
        self.batchdim = batchdim
        self.batches_per_execution = batches_per_execution
        self._closed = threading.Event()
        self._host = {d: _Channel(loader_prefetch_size, self._closed) for d in self._devices}
        self._ready = {d: _Channel(device_prefetch_size, self._closed) for d in self._devices}
        self._threads = [threading.Thread(target=self._read_host, daemon=True)]
        self._threads += [
            threading.Thread(target=self._transfer, args=(d, host_to_device_transfer_threads),
                             daemon=True)
            for d in self._devices
            for _ in range(host_to_device_transfer_threads)
        ]
        self._transfers_left = {d: host_to_device_transfer_threads for d in self._devices}
        self._lock = threading.Lock()
        _live.add(self)
        for thread in self._threads:
            thread.start()

    def per_device_loader(self, device: torch.device | str) -> PerDeviceLoader:
        device = torch.device(device)
        if device not in self._ready:
            raise ValueError(f"{device} is not one of this loader's devices {self._devices}")
        return PerDeviceLoader(self, device)

    def per_device_samples(self) -> int:
        return len(self._loader) // len(self._devices)

    def next_item(self, device: torch.device) -> Any:
        item = self._ready[device].get()
        if isinstance(item, _Failure):
            self.close()
            raise item.error
        return item

    def stop(self) -> None:
        """Ask the worker threads to end, without waiting for them."""
        self._closed.set()

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker threads and wait for them, each at most `timeout` seconds if
        given (idempotent)."""
        self.stop()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    # --- worker threads ---------------------------------------------------

    def _read_host(self) -> None:
        try:
            round_: list[Any] = []
            for batch in self._loader:
                round_.append(batch)
                if len(round_) == len(self._devices):
                    for device, item in zip(self._devices, round_, strict=True):
                        if not self._host[device].put(item):
                            return
                    round_ = []
        except BaseException as error:  # the training loop re-raises it
            for device in self._devices:
                self._host[device].put(_Failure(error))
        for device in self._devices:
            for _ in range(self._transfers_left[device]):
                self._host[device].put(_END)

    def _transfer(self, device: torch.device, threads: int) -> None:
        while True:
            item = self._host[device].get()
            if item is _END or isinstance(item, _Failure):
                break
            try:
                item = to_device(item, device, self._input_sharding)
            except BaseException as error:
                item = _Failure(error)
            if not self._ready[device].put(item):
                return
        with self._lock:
            self._transfers_left[device] -= 1
            last = self._transfers_left[device] == 0
        if last or isinstance(item, _Failure):
            self._ready[device].put(item)


class MpDeviceLoader:
    """Wraps a host data loader for one device; each iteration is a fresh epoch."""

    def __init__(self, loader: Iterable, device: torch.device | str, **kwargs: Any) -> None:
        self._loader = loader
        self._device = torch.device(device)
        self._kwargs = kwargs

    def __iter__(self) -> Iterator[Any]:
        parallel = ParallelLoader(self._loader, [self._device], **self._kwargs)
        return parallel.per_device_loader(self._device)

    def __len__(self) -> int:
        return len(self._loader)


def _close_at_exit() -> None:
    """Stop every loader's worker threads and wait for them before the interpreter and the
    runtime shut down: a loop that breaks out of a loader leaves them moving batches to
    the device, and the runtime torn down under a running copy aborts the process
    (`terminate called without an active exception`, exit code 134). Registered after
    the engine's own exit hook (`lazy/graph.py`), so it runs before it."""
    for loader in list(_live):
        loader.close(_EXIT_JOIN_SECONDS)


atexit.register(_close_at_exit)
