"""`torch_xla._internal.pjrt`: run a function on every device of this host.

PyTorch/XLA's tests use `run_multiprocess` and `spawn`; both start one process per
chip through `xmp.spawn` (see `torch_xla.distributed.xla_multiprocessing`), with one
thread per device where the plugin's processes drive several. `spawn_threads` runs
`fn` in this process, one thread per device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")


class _OnOrdinal:
    """Picklable `fn(*args, **kwargs)` that reports the global ordinal it ran on."""

    def __init__(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs

    def __call__(self, index: int) -> tuple[int, Any]:
        import torch_xla.runtime as xr

        return xr.global_ordinal(), self.fn(*self.args, **self.kwargs)


def run_multiprocess(fn: Callable[..., R], *args: Any, start_method: str = "spawn",
                     **kwargs: Any) -> dict[int, R]:
    """`fn(*args, **kwargs)` in one process per device; results by global device ordinal."""
    from torch_xla.distributed import xla_multiprocessing as xmp
    from torch_xla.pjrt.client import started

    if started() is not None:
        raise RuntimeError("Runtime is already initialized. Do not use the XLA device "
                           "before calling run_multiprocess (or xmp.spawn).")
    results = xmp.spawn(_OnOrdinal(fn, args, kwargs), start_method=start_method)
    by_ordinal = dict(results.values())
    if len(by_ordinal) != len(results):
        raise RuntimeError(f"Two processes reported the same device ordinal: {results}")
    return by_ordinal


def spawn_threads(fn: Callable, args: tuple = ()) -> dict[int, Any]:
    """`fn(index, *args)` in this process, one thread per device (each thread's
    `torch_xla.device()` is its own device), as the replicas of one job: collectives
    between the threads run as one replicated program. Returns `fn`'s results by global
    ordinal (PyTorch/XLA returns None).
    """
    from torch_xla.distributed import xla_multiprocessing as xmp

    return xmp.run_on_each_device(fn, args)


def spawn(fn: Callable, nprocs: int | None = None, start_method: str = "spawn",
          args: tuple = ()) -> None:
    """`fn(index, *args)` on every device, as `xmp.spawn` does; returns nothing."""
    from torch_xla.distributed import xla_multiprocessing as xmp

    xmp.spawn(fn, args=args, nprocs=nprocs, start_method=start_method)
