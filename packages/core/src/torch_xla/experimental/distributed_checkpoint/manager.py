"""`CheckpointManager`: numbered checkpoints of (sharded) training state in one folder.

Each checkpoint is the folder `<path>/<step>`, written by `torch.distributed.checkpoint`
with the SPMD planners. A save writes into `<path>/.pending-<step>` and renames it into
place only when complete, so a crash mid-save leaves every earlier checkpoint (and an
earlier one of the same step) whole; unfinished folders are never listed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import datetime

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import STATE_DICT_TYPE

import torch_xla
from torch_xla.core import xla_model as xm
from torch_xla.experimental.distributed_checkpoint._preemption import _on_sigterm
from torch_xla.experimental.distributed_checkpoint._tiles import to_host
from torch_xla.experimental.distributed_checkpoint.planners import (
    SPMDLoadPlanner,
    SPMDSavePlanner,
    require_process_group,
)

_MANAGER_METADATA_FILE = ".manager_metadata"  # in each checkpoint folder: step and time
_PENDING = ".pending-"  # a checkpoint being written
_REPLACED = ".replaced-"  # a checkpoint of the same step, while a new one takes its place

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _CheckpointMetadata:
    step: int  # the training step the checkpoint was taken at
    ts: datetime  # when it was taken


class CheckpointManager:
    """Takes a checkpoint every `save_interval` steps into `path/<step>` (or when a
    preemption is signalled), keeps the newest `max_to_keep` (0: all), restores any of
    them, and saves in the background (`save_async`).

    >>> mgr = CheckpointManager("/ckpt/run1", save_interval=100, max_to_keep=3)
    >>> if mgr.all_steps():
    ...     state = {"model": model.state_dict(), "optim": optim.state_dict()}
    ...     mgr.restore(max(mgr.all_steps()), state)   # in place, onto this run's sharding
    >>> for step, batch in enumerate(loader):
    ...     ...
    ...     mgr.save_async(step, {"model": model.state_dict(), "optim": optim.state_dict()})
    >>> mgr.join()
    """

    def __init__(self, path: str | os.PathLike, save_interval: int, max_to_keep: int = 0,
                 max_pending_async: int = 1, num_of_threads: int = 1,
                 process_group: dist.ProcessGroup | None = None,
                 chkpt_on_preemption: bool = True) -> None:
        """`process_group`: the processes that save together (default: the default group
        when torch.distributed is initialized, else this process alone).
        `chkpt_on_preemption`: on SIGTERM, `should_save` is true at the next step
        (the process then keeps running: exit after the checkpoint)."""
        for name, value, low in (("save_interval", save_interval, 1),
                                 ("max_to_keep", max_to_keep, 0),
                                 ("max_pending_async", max_pending_async, 1),
                                 ("num_of_threads", num_of_threads, 1)):
            if value < low:
                raise ValueError(f"CheckpointManager: {name} must be >= {low}, got {value}.")
        self.base_path = os.fspath(path)
        self.save_interval = save_interval
        self.max_to_keep = max_to_keep
        self.num_of_threads = num_of_threads
        self.chkpt_on_preemption = chkpt_on_preemption
        require_process_group("CheckpointManager")
        self.pg = process_group
        self._distributed = dist.is_available() and dist.is_initialized()
        self._async_worker_pool = ThreadPoolExecutor(max_workers=1)
        self._async_sem = threading.Semaphore(max_pending_async)
        self._async_futures: list[Future] = []
        self._save_mutex = threading.Lock()  # one checkpoint written at a time
        self._tracked_chkpts = self._load_tracked_chkpts()
        self._preempted = threading.Event()
        if chkpt_on_preemption:
            _on_sigterm(self._preempted.set)

    # --- the folder ---------------------------------------------------------------

    def _get_path(self, step: int) -> str:
        return os.path.join(self.base_path, str(step))

    def _load_tracked_chkpts(self) -> list[_CheckpointMetadata]:
        os.makedirs(self.base_path, exist_ok=True)
        if self._rank() == 0:
            _recover_replaced(self.base_path)
        self._barrier()
        found, invalid = [], []
        for name in sorted(os.listdir(self.base_path)):
            if name.startswith("."):
                continue
            try:
                found.append(_read_metadata(os.path.join(self.base_path, name)))
            except (OSError, ValueError, KeyError) as e:
                invalid.append(f"{name} ({e})")
        if invalid:
            logger.warning("CheckpointManager: ignoring folders of %s that hold no complete "
                           "checkpoint: %s", self.base_path, ", ".join(invalid))
        return sorted(found, key=lambda m: m.ts)

    def _rank(self) -> int:
        return dist.get_rank(self.pg) if self._distributed else 0

    def _barrier(self) -> None:
        if self._distributed:
            dist.barrier(self.pg)

    def _save(self, step: int, state_dict: STATE_DICT_TYPE) -> None:
        with self._save_mutex:
            pending = os.path.join(self.base_path, f"{_PENDING}{step}")
            if self._rank() == 0:
                shutil.rmtree(pending, ignore_errors=True)  # left by a crash
            self._barrier()
            dcp.save(state_dict,
                     storage_writer=dcp.FileSystemWriter(pending,
                                                         thread_count=self.num_of_threads),
                     planner=SPMDSavePlanner(), process_group=self.pg,
                     no_dist=not self._distributed)
            metadata = _CheckpointMetadata(step=step, ts=datetime.now())
            if self._rank() == 0:
                _write_metadata(pending, metadata)
                _replace(pending, self._get_path(step))
            self._barrier()
            self._tracked_chkpts = [m for m in self._tracked_chkpts if m.step != step]
            self._tracked_chkpts.append(metadata)
            self._release_oldest_checkpoints()

    def _release_oldest_checkpoints(self) -> None:
        while self.max_to_keep > 0 and len(self._tracked_chkpts) > self.max_to_keep:
            oldest = self._tracked_chkpts.pop(0)
            if self._rank() == 0:
                shutil.rmtree(self._get_path(oldest.step), ignore_errors=True)

    # --- the API ------------------------------------------------------------------

    def should_save(self, step: int) -> bool:
        """Whether to checkpoint at `step`: every `save_interval` steps, and at the first
        step after a preemption signal."""
        preempted = self.chkpt_on_preemption and self.reached_preemption(step)
        if preempted:
            logger.warning("CheckpointManager: preemption signalled; checkpointing at step %d.",
                           step)
        return step % self.save_interval == 0 or preempted

    def save(self, step: int, state_dict: STATE_DICT_TYPE, force: bool = False) -> bool:
        """Checkpoint `state_dict` now if `should_save(step)` (or `force`); True if it did."""
        if not (self.should_save(step) or force):
            return False
        _wait_for_data()
        self._save(step, state_dict)
        return True

    def save_async(self, step: int, state_dict: STATE_DICT_TYPE, force: bool = False) -> bool:
        """As `save`, but only the copy to the host (each process: the tiles its devices
        own) happens now; the write goes on in a background thread. Blocks while
        `max_pending_async` saves are still being written. `join()` waits for them."""
        if not (self.should_save(step) or force):
            return False
        _wait_for_data()
        staged = to_host(state_dict)
        self._async_sem.acquire()
        future = self._async_worker_pool.submit(self._save, step, staged)
        future.add_done_callback(lambda _: self._async_sem.release())
        self._async_futures.append(future)
        return True

    def restore(self, step: int, state_dict: STATE_DICT_TYPE) -> None:
        """Load the checkpoint of `step` into `state_dict` in place (each tensor keeps its
        own sharding). Non-tensor values land in `state_dict`: pass them on yourself
        (`optim.load_state_dict(state_dict["optim"])`)."""
        steps = self.all_steps()
        if step not in steps:
            raise ValueError(f"CheckpointManager.restore: no checkpoint of step {step} in "
                             f"{self.base_path}; it holds steps {steps}.")
        dcp.load(state_dict, storage_reader=dcp.FileSystemReader(self._get_path(step)),
                 planner=SPMDLoadPlanner(), process_group=self.pg,
                 no_dist=not self._distributed)

    def all_steps(self) -> list[int]:
        """The steps of the complete checkpoints this manager tracks, ascending."""
        return sorted(m.step for m in self._tracked_chkpts)

    def join(self) -> None:
        """Wait for the background saves; raise the first one's error, if any failed."""
        done, _ = wait(self._async_futures)
        self._async_futures = []
        for future in done:
            future.result()

    def reached_preemption(self, step: int) -> bool:
        """True once, at the first step asked about after a SIGTERM (by any process of the
        group)."""
        if not self.chkpt_on_preemption:
            raise RuntimeError("CheckpointManager.reached_preemption: preemption detection is "
                               "off; create the manager with chkpt_on_preemption=True.")
        flag = torch.tensor([int(self._preempted.is_set())])
        if self._distributed:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.pg)
        self._preempted.clear()
        return bool(flag.item())


def _wait_for_data() -> None:
    torch_xla.sync()
    xm.wait_device_ops()


def _write_metadata(folder: str, metadata: _CheckpointMetadata) -> None:
    with open(os.path.join(folder, _MANAGER_METADATA_FILE), "w") as f:
        json.dump({"step": metadata.step, "ts": metadata.ts.isoformat()}, f)
        f.flush()
        os.fsync(f.fileno())


def _read_metadata(folder: str) -> _CheckpointMetadata:
    with open(os.path.join(folder, _MANAGER_METADATA_FILE)) as f:
        found = json.load(f)
    return _CheckpointMetadata(step=int(found["step"]), ts=datetime.fromisoformat(found["ts"]))


def _replace(pending: str, final: str) -> None:
    """Put the complete folder `pending` at `final`; an earlier `final` is set aside
    first and deleted only once the new one is in place."""
    parent, name = os.path.split(final)
    replaced = os.path.join(parent, f"{_REPLACED}{name}")
    if os.path.exists(final):
        shutil.rmtree(replaced, ignore_errors=True)
        os.rename(final, replaced)
    os.rename(pending, final)
    _fsync_dir(parent)
    shutil.rmtree(replaced, ignore_errors=True)


def _recover_replaced(base: str) -> None:
    """A crash between the two renames of `_replace` leaves the old checkpoint set aside
    and none in its place: put it back."""
    for name in os.listdir(base):
        if name.startswith(_REPLACED):
            final = os.path.join(base, name[len(_REPLACED):])
            if os.path.exists(final):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
            else:
                os.rename(os.path.join(base, name), final)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
