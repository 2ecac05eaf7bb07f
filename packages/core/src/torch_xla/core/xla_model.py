"""`torch_xla.core.xla_model` (xm): the PyTorch/XLA user API for devices and steps."""

from __future__ import annotations

import concurrent.futures
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import IO, Any

import torch
from torch.utils._pytree import tree_map_only

import torch_xla.runtime as xr
from torch_xla._atomic import atomic_open
from torch_xla.lazy import graph, rng


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """`xla:n`; checks that the device exists (this starts the runtime client)."""
    from torch_xla.pjrt.client import client

    index = 0 if n is None else int(n)
    client().device(index)
    return torch.device("xla", index)


def mark_step(wait: bool = False) -> None:
    """Compile (or fetch from cache) and run everything pending, as one graph per device."""
    graph.mark_step()
    _run_step_closures()
    if wait:
        wait_device_ops()


def wait_device_ops(devices: list | None = None) -> None:
    """Block until every computation handed to the devices (and async closures) finished."""
    graph.wait_device_ops()
    _wait_async_closures()


def get_rng_state(device: torch.device | None = None) -> int:
    return rng.get_state()


def set_rng_state(seed: int, device: torch.device | None = None) -> None:
    rng.set_state(seed)


# --- training-loop API (issue 4) ---------------------------------------------

_closures: list[tuple[Callable[..., Any], tuple]] = []
_async_closures: concurrent.futures.ThreadPoolExecutor | None = None


def add_step_closure(
    closure: Callable[..., Any], args: tuple = (), run_async: bool = False
) -> None:
    """Run `closure(*args)` after the next step has executed.

    Use it to read values of the step (losses, accuracy) without cutting the
    graph in the middle of the step. With `run_async=True` the closure runs in
    a background thread, in order with other asynchronous closures.
    """
    _closures.append((closure if not run_async else _run_async(closure), tuple(args)))


def _run_async(closure: Callable[..., Any]) -> Callable[..., Any]:
    def submit(*args: Any) -> None:
        global _async_closures
        if _async_closures is None:
            _async_closures = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="xla-step-closure"
            )
        _async_closures.submit(closure, *args)

    return submit


def _run_step_closures() -> None:
    pending, _closures[:] = list(_closures), []
    for closure, args in pending:
        closure(*args)


def _wait_async_closures() -> None:
    if _async_closures is not None:
        _async_closures.submit(lambda: None).result()


def optimizer_step(
    optimizer: torch.optim.Optimizer,
    barrier: bool = False,
    optimizer_args: dict | None = None,
    groups: list[list[int]] | None = None,
    pin_layout: bool = True,
) -> Any:
    """Reduce gradients across replicas, step the optimizer; with `barrier`, mark the step.

    Returns what `optimizer.step()` returns (the loss when a closure is passed).
    """
    reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
    loss = optimizer.step(**(optimizer_args or {}))
    if barrier:
        mark_step()
    return loss


def reduce_gradients(
    optimizer: torch.optim.Optimizer, groups: list[list[int]] | None = None,
    pin_layout: bool = True,
) -> None:
    """Average the gradients of `optimizer`'s parameters over all replicas."""
    replicas = xr.world_size()
    if replicas > 1:
        raise NotImplementedError(
            f"Gradient reduction over {replicas} replicas needs collectives, which this "
            "release does not have yet; run one process (world_size() == 1)."
        )


def is_master_ordinal(local: bool = True) -> bool:
    """Whether this process's default device is ordinal 0 (of this host, or of the job)."""
    return (xr.local_ordinal() if local else xr.global_ordinal()) == 0


def master_print(
    *args: Any, fd: IO[str] | None = None, finalizer: Callable | None = None
) -> None:
    """`print` (to `fd`, default stdout) on the master ordinal of the job only."""
    if is_master_ordinal(local=False):
        print(*args, file=fd if fd is not None else sys.stdout, flush=True)
        if finalizer is not None:
            finalizer()


def xrt_world_size(defval: int = 1) -> int:
    """Deprecated: use `torch_xla.runtime.world_size()`."""
    warnings.warn("xm.xrt_world_size() is deprecated; use torch_xla.runtime.world_size()",
                  DeprecationWarning, stacklevel=2)
    return xr.world_size()


def get_ordinal(defval: int = 0) -> int:
    """Deprecated: use `torch_xla.runtime.global_ordinal()`."""
    warnings.warn("xm.get_ordinal() is deprecated; use torch_xla.runtime.global_ordinal()",
                  DeprecationWarning, stacklevel=2)
    return xr.global_ordinal()


def get_local_ordinal(defval: int = 0) -> int:
    """Deprecated: use `torch_xla.runtime.local_ordinal()`."""
    warnings.warn("xm.get_local_ordinal() is deprecated; use torch_xla.runtime.local_ordinal()",
                  DeprecationWarning, stacklevel=2)
    return xr.local_ordinal()


def get_xla_supported_devices(devkind: str | None = None, max_devices: int | None = None
                              ) -> list[str]:
    """The devices this process drives, as `xla:N` strings (of `devkind` if given)."""
    if devkind is not None and devkind.upper() != xr.device_type():
        return []
    count = xr.addressable_device_count()
    if max_devices is not None:
        count = min(count, max_devices)
    return [f"xla:{i}" for i in range(count)]


def xla_device_hw(device: torch.device | str) -> str:
    """The hardware type (`xr.device_type()`) behind an `xla:N` device."""
    device = torch.device(device)
    if device.type != "xla":
        raise ValueError(f"{device} is not an XLA device; expected xla:N")
    return xr.device_type()


def rendezvous(tag: str, payload: bytes = b"", replicas: list[int] | None = None) -> list[bytes]:
    """Wait for every replica to reach `tag`; returns every replica's payload."""
    if xr.world_size() > 1:
        raise NotImplementedError(
            "rendezvous across several processes needs the distributed runtime, which this "
            "release does not have yet."
        )
    return [payload]


class RateTracker:
    """Items per second: `rate()` since the last call (smoothed), `global_rate()` overall."""

    def __init__(self, smooth_factor: float | None = None) -> None:
        self._smooth_factor = 0.4 if smooth_factor is None else smooth_factor
        self._start = self._last = time.time()
        self._total = 0.0
        self._since_last = 0.0
        self._last_rate: float | None = None

    def add(self, count: float) -> None:
        self._since_last += count

    def rate(self) -> float:
        now = time.time()
        elapsed = now - self._last
        if elapsed <= 0:
            return self._last_rate or 0.0
        current = self._since_last / elapsed
        if self._last_rate is not None:
            current = (1 - self._smooth_factor) * current + self._smooth_factor * self._last_rate
        self._total += self._since_last
        self._since_last = 0.0
        self._last, self._last_rate = now, current
        return current

    def global_rate(self) -> float:
        elapsed = time.time() - self._start
        return (self._total + self._since_last) / elapsed if elapsed > 0 else 0.0


def _to_cpu(data: Any) -> Any:
    return tree_map_only(
        torch.Tensor, lambda t: t.detach().to("cpu") if t.device.type == "xla" else t, data
    )


def save(
    data: Any, file_or_path: str | os.PathLike | IO[bytes], master_only: bool = True,
    global_master: bool = False,
) -> None:
    """`torch.save` with XLA tensors moved to the CPU, on the master ordinal only.

    A path is written atomically: an interrupted save leaves the previous file.
    """
    if not master_only or is_master_ordinal(local=not global_master):
        cpu_data = _to_cpu(data)
        if isinstance(file_or_path, (str, os.PathLike)):
            with atomic_open(file_or_path) as f:
                torch.save(cpu_data, f)
        else:
            torch.save(cpu_data, file_or_path)
    rendezvous("torch_xla.core.xla_model.save")
