"""Agreeing on the step to checkpoint at when a process is told it will be preempted.

PyTorch/XLA's preemption sync manager (`torch_xla._XLAC._activate_preemption_sync_manager`,
`_sync_point_reached`) over the job's coordinator: a SIGTERM to any process makes
`sync_point_reached(step)` true on every process at the same step. In a job of several
processes every process must ask at every step: the question is a meeting at the
coordinator (`pjrt.distributed.exchange`), where the processes share whether they were
signalled.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

from torch_xla.pjrt import distributed


class _Sync:
    """The active preemption sync manager: its SIGTERM flag, and the handler it replaced."""

    def __init__(self) -> None:
        self.signalled = threading.Event()
        self.previous = _on_sigterm(self.signalled.set)


_active: _Sync | None = None


def activate() -> None:
    """Start noticing SIGTERM (then the handler that was there before, if a Python
    function, still runs); activating again changes nothing."""
    global _active
    if _active is None:
        _active = _Sync()


def deactivate() -> None:
    """Stop noticing SIGTERM: the handler from before `activate` is back."""
    global _active
    if _active is not None:
        signal.signal(signal.SIGTERM, _active.previous)
        _active = None


def sync_point_reached(step: int) -> bool:
    """True at the first `step` asked about after any process of the job got a SIGTERM
    (then false again until the next one)."""
    if _active is None:
        raise RuntimeError(
            f"sync_point_reached({step}): the preemption sync manager is not active; call "
            "torch_xla._XLAC._activate_preemption_sync_manager() first.")
    reached = _active.signalled.is_set()
    if distributed.joined() and distributed.process_count() > 1:
        flags = distributed.exchange("preemption_sync", b"%d" % reached,
                                     what=f"the preemption sync point check of step {step}")
        reached = any(flag == b"1" for flag in flags)
    if reached:
        _active.signalled.clear()
    return reached


def _on_sigterm(callback: Callable[[], None]) -> Any:
    """Call `callback` on SIGTERM instead of ending the process (then the handler that
    was there before, if it was a Python function); returns that earlier handler."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "Preemption detection handles SIGTERM, which only the main thread may do: create "
            "CheckpointManager(chkpt_on_preemption=True), or activate the preemption sync "
            "manager, in the main thread (or pass chkpt_on_preemption=False).")
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        callback()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, handler)
    return previous
