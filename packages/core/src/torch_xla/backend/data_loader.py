"""`DataLoader` workers started by forking a process that runs the XLA runtime.

jax warns at every `os.fork()` of a process whose backend exists ("os.fork() was
called ... this will likely lead to a deadlock"): a child that used jax would find its
threads gone. A `DataLoader` worker never uses the device: it runs the dataset and the
collate function on the CPU and sends batches back, which the parent moves to the
device (`MpDeviceLoader`). That is the fork every PyTorch/XLA input pipeline with
`num_workers > 0` makes, so the warning is silenced while a loader starts its workers,
and only then; any other fork still warns.
"""

from __future__ import annotations

import functools
import warnings

from torch.utils.data import dataloader

from torch_xla.backend.wrapping import wrap_once

FORK_WARNING = r"os\.fork\(\) was called"


def _quiet_fork(start):
    @functools.wraps(start)
    def __init__(self, loader) -> None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=FORK_WARNING, category=RuntimeWarning)
            start(self, loader)

    return __init__


def register() -> None:
    """Start `DataLoader` workers without jax's fork warning (idempotent)."""
    wrap_once(dataloader._MultiProcessingDataLoaderIter, "__init__", _quiet_fork)
