"""`torch_xla._internal.pjrt`: run a function on every device of this host.

PyTorch/XLA's tests use `run_multiprocess` and `spawn`; both start one process per
chip through `xmp.spawn` (see `torch_xla.distributed.xla_multiprocessing`), with one
thread per device where the plugin's processes drive several. `spawn_threads` runs
`fn` in this process, one thread per device. `initialize_multiprocess` and
`initialize_singleprocess` set up a process that a launcher of one's own started.
"""

from __future__ import annotations

import os
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


def initialize_singleprocess() -> None:
    """Start this process's runtime as a job of its own (it starts on first device use
    anyway). A process that torchrun's variables place in a job still joins that job."""
    from torch_xla.pjrt import distributed

    os.environ.setdefault(distributed.LOCAL_COUNT_ENV, "1")
    _start()


def initialize_multiprocess(local_rank: int, local_world_size: int) -> None:
    """Start this process's runtime as process `local_rank` of the `local_world_size`
    processes of this host, as `xmp.spawn` does in each child, for a launcher of one's
    own: every process calls it, and they form one job through the coordinator at
    XLA_COORDINATOR_ADDRESS (default: MASTER_ADDR or localhost, port 8547). Variables
    already set (`PJRT_LOCAL_PROCESS_RANK`, `PJRT_LOCAL_PROCESS_COUNT`) win, as in
    PyTorch/XLA."""
    from torch_xla.pjrt import distributed

    os.environ.setdefault(distributed.LOCAL_RANK_ENV, str(local_rank))
    os.environ.setdefault(distributed.LOCAL_COUNT_ENV, str(local_world_size))
    _start()


def _start() -> None:
    """Start the runtime with this process's place in the job as the environment now says
    it; refuse a runtime already started in another place."""
    from torch_xla.pjrt import distributed
    from torch_xla.pjrt.client import client, started

    where = distributed.topology()
    rank, count = (where.rank, where.count) if where is not None else (0, 1)
    running = started()
    if running is not None:
        import torch_xla.runtime as xr

        if (xr.process_index(), xr.process_count()) != (rank, count):
            raise RuntimeError(
                f"The XLA runtime already started as process {xr.process_index()} of "
                f"{xr.process_count()}, not {rank} of {count}: call initialize_multiprocess "
                "(or initialize_singleprocess) before the first use of the XLA device."
            )
        return
    client()
