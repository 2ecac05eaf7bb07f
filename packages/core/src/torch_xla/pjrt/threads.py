"""Several devices per process: one thread drives each, and the threads meet at each
replicated step.

Each thread has a current device (`xla:N`, an index into this process's devices): the
device `torch_xla.device()` returns and `torch.device('xla')` means in that thread. A
thread that never set one uses xla:0.

`run(fn, devices)` runs `fn` in one thread per device, as replicas of one job: while it
runs, the threads of this process `gather` at every step with collectives (and at every
rendezvous). The last thread to arrive does the work for all of them (runs the one
replicated program with every device's inputs) and each thread takes back its part.
When a replica thread raises, the others stop waiting at once instead of at the
collective timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

R = TypeVar("R")

_local = threading.local()


def current() -> int | None:
    """The calling thread's device index, or None if it never chose one."""
    return getattr(_local, "device", None)


def current_index() -> int:
    """The calling thread's device index (0 if it never chose one)."""
    index = getattr(_local, "device", None)
    return 0 if index is None else index


def set_current(index: int | None) -> int | None:
    """Make `xla:index` the calling thread's device; returns the previous choice."""
    previous = getattr(_local, "device", None)
    _local.device = index
    return previous


class ReplicaThreadError(RuntimeError):
    """A replica thread could not meet the others (one raised, or one never came)."""


class Replicas:
    """The devices of this process that threads drive as replicas, and where they meet."""

    def __init__(self, devices: Sequence[int], timeout_s: Callable[[], float]) -> None:
        self.devices = list(devices)  # local device indices, in replica order
        self._position = {d: k for k, d in enumerate(self.devices)}
        self._timeout_s = timeout_s
        self._cond = threading.Condition()
        self._arrived: dict[int, tuple[str, Any]] = {}
        self._round = 0
        self._outcome: tuple[bool, Any] = (True, None)
        self._broken: BaseException | None = None

    def position(self, device: int) -> int:
        found = self._position.get(device)
        if found is None:
            raise ReplicaThreadError(
                f"xla:{device} is not one of the replica devices "
                f"{[f'xla:{d}' for d in self.devices]}; a replica thread meets the others "
                "only from its own device."
            )
        return found

    def gather(self, point: str, payload: Any,
               combine: Callable[[list[Any]], list[Any]]) -> Any:
        """Wait until every replica thread reached `point`; the last one calls
        `combine(payloads in replica order)`, whose k-th result goes to replica k."""
        me = self.position(current_index())
        with self._cond:
            self._check_broken()
            my_round = self._round
            self._arrived[me] = (point, payload)
            if len(self._arrived) == len(self.devices):
                arrived, self._arrived = self._arrived, {}
                self._outcome = _combine(arrived, combine)
                self._round += 1
                self._cond.notify_all()
            else:
                self._wait(my_round, point)
            ok, value = self._outcome
        if not ok:
            raise value
        return value[me]

    def _wait(self, my_round: int, point: str) -> None:
        timeout = self._timeout_s()
        deadline = time.monotonic() + timeout
        while self._round == my_round:
            self._check_broken()
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [f"xla:{self.devices[k]}" for k in range(len(self.devices))
                           if k not in self._arrived]
                error = ReplicaThreadError(
                    f"The thread of xla:{current_index()} waited {timeout:g} s at {point}, "
                    f"but the threads of {missing} did not arrive. Every replica thread must "
                    "run the same steps with collectives and rendezvous, in the same order; "
                    "raise TORCH_XLA_COLLECTIVE_TIMEOUT if one is only slower."
                )
                self._broken = error
                self._cond.notify_all()
                raise error
            self._cond.wait(left)

    def _check_broken(self) -> None:
        if self._broken is not None:
            raise ReplicaThreadError(
                f"The thread of xla:{current_index()} stopped waiting for the other replica "
                f"threads: {self._broken}"
            ) from self._broken

    def abandon(self, device: int, error: BaseException) -> None:
        """Replica `device`'s thread raised `error`: nobody waits for it any more."""
        with self._cond:
            if self._broken is None:
                self._broken = ReplicaThreadError(
                    f"the thread of xla:{device} raised {type(error).__name__}: {error}")
            self._cond.notify_all()


def _combine(arrived: dict[int, tuple[str, Any]],
             combine: Callable[[list[Any]], list[Any]]) -> tuple[bool, Any]:
    points = {point for point, _ in arrived.values()}
    if len(points) > 1:
        where = {f"replica {k}": point for k, (point, _) in sorted(arrived.items())}
        return False, ReplicaThreadError(
            f"The replica threads reached different meeting points together: {where}. "
            "Every replica thread must run the same steps with collectives and rendezvous, "
            "in the same order."
        )
    try:
        return True, combine([arrived[k][1] for k in range(len(arrived))])
    except BaseException as error:  # every replica thread raises it
        return False, error


_replicas: Replicas | None = None
_replicas_lock = threading.Lock()


def replicas() -> Replicas | None:
    """The replica threads running now in this process, or None."""
    return _replicas


def run(fn: Callable[[], R], devices: Sequence[int],
        timeout_s: Callable[[], float]) -> list[R]:
    """`fn()` in one thread per device of `devices` (local indices), each thread with its
    own current device, as replicas that meet at every replicated step; results in order.

    Raises the first replica's error (the others stop waiting for it)."""
    global _replicas
    with _replicas_lock:
        if _replicas is not None:
            raise RuntimeError(
                f"Replica threads are already running on {[f'xla:{d}' for d in _replicas.devices]}"
                "; start one set of replica threads at a time (spawn_threads, DataParallel, "
                "xmp.spawn with several devices per process)."
            )
        _replicas = group = Replicas(devices, timeout_s)
    results: list[Any] = [None] * len(group.devices)
    errors: list[tuple[int, BaseException]] = []

    def drive(k: int, device: int) -> None:
        set_current(device)
        try:
            results[k] = fn()
        except BaseException as error:  # noqa: BLE001 - raised again by run()
            errors.append((k, error))
            group.abandon(device, error)

    threads = [threading.Thread(target=drive, args=(k, d), name=f"xla:{d}", daemon=True)
               for k, d in enumerate(group.devices)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        with _replicas_lock:
            _replicas = None
    if errors:
        # The first replica that raised, not the ones that only stopped waiting for it.
        first = min(errors, key=lambda e: isinstance(e[1], ReplicaThreadError))
        raise first[1]
    return results
