"""Where this process sits in a multi-process job, and joining the job's coordinator.

A job is started either by `xmp.spawn` (which sets the `PJRT_*` variables below
in each child) or by another launcher such as torchrun (`LOCAL_RANK`,
`LOCAL_WORLD_SIZE`, `RANK`, `WORLD_SIZE`, `MASTER_ADDR`). Before its PJRT
client exists each process joins jax's distributed runtime (the coordination
service, hosted by process 0), so the client sees every device of the job and
collectives can span processes.

Processes also meet through the coordinator (`barrier`, `exchange`): at a
rendezvous, at the check that they compile the same replicated program, before
each step with collectives, and before reading a tensor sharded over several
processes (SPMD). Each meeting waits at most
`TORCH_XLA_COLLECTIVE_TIMEOUT` seconds, then raises `PeerTimeoutError` naming
the processes that did not arrive, instead of hanging.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

# Set by xmp.spawn in each child (names as in PyTorch/XLA).
LOCAL_RANK_ENV = "PJRT_LOCAL_PROCESS_RANK"
LOCAL_COUNT_ENV = "PJRT_LOCAL_PROCESS_COUNT"
# host:port of the coordination service; xmp.spawn picks a free port.
COORDINATOR_ENV = "XLA_COORDINATOR_ADDRESS"
DEFAULT_COORDINATOR_PORT = 8547
# Seconds a process waits for the others to join before giving up.
JOIN_TIMEOUT_ENV = "XLA_COORDINATOR_TIMEOUT"
DEFAULT_JOIN_TIMEOUT = 120
# Seconds a process waits for the others at a meeting point (rendezvous, mesh_reduce, the
# replicated-program check, the start of a step with collectives) before it raises.
COLLECTIVE_TIMEOUT_ENV = "TORCH_XLA_COLLECTIVE_TIMEOUT"
DEFAULT_COLLECTIVE_TIMEOUT = 600.0

# Meetings at the same point are numbered, so a point (a rendezvous tag) can recur every step.
_generations: dict[str, int] = {}
_ARRIVED = "torch_xla/arrived"  # /<point>/<rank> -> the last generation that rank reached


class DistributedError(RuntimeError):
    """The multi-process environment is inconsistent, or the processes could not meet."""


class PeerTimeoutError(DistributedError):
    """Processes did not reach a meeting point in time; `missing` lists their ranks."""

    def __init__(self, message: str, missing: list[int]) -> None:
        super().__init__(message)
        self.missing = missing


@dataclasses.dataclass(frozen=True)
class Topology:
    local_rank: int  # this process among the processes of its host
    local_count: int  # processes on this host
    rank: int  # this process among all processes of the job
    count: int  # processes of the job
    coordinator: str  # host:port of the coordination service


def _int_env(name: str) -> int | None:
    text = os.environ.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise DistributedError(f"{name}={text!r} is not an integer.") from None


def topology() -> Topology | None:
    """This process's place in a multi-process job, or None when it runs alone."""
    local_rank, local_count = _int_env(LOCAL_RANK_ENV), _int_env(LOCAL_COUNT_ENV)
    rank, count = _int_env("RANK"), _int_env("WORLD_SIZE")
    if local_rank is None or local_count is None:  # not under xmp.spawn: maybe torchrun
        local_rank, local_count = _int_env("LOCAL_RANK"), _int_env("LOCAL_WORLD_SIZE")
        if local_count is None and local_rank is not None:  # no LOCAL_WORLD_SIZE: one host
            local_count = count
    if local_rank is None or local_count is None:
        return None
    if rank is None or count is None:  # one host
        rank, count = local_rank, local_count
    if not (0 <= local_rank < local_count and 0 <= rank < count and local_count <= count):
        raise DistributedError(
            f"Inconsistent process topology: local rank {local_rank} of {local_count}, "
            f"rank {rank} of {count}. Check {LOCAL_RANK_ENV}/{LOCAL_COUNT_ENV} "
            "(or LOCAL_RANK/LOCAL_WORLD_SIZE/RANK/WORLD_SIZE)."
        )
    coordinator = os.environ.get(COORDINATOR_ENV)
    if not coordinator:
        host = os.environ.get("MASTER_ADDR", "localhost")
        coordinator = f"{host}:{DEFAULT_COORDINATOR_PORT}"
    return Topology(local_rank, local_count, rank, count, coordinator)


def join(where: Topology) -> None:
    """Join the job's coordination service (process 0 hosts it); before any jax backend."""
    import jax

    timeout = _int_env(JOIN_TIMEOUT_ENV) or DEFAULT_JOIN_TIMEOUT
    try:
        jax.distributed.initialize(
            coordinator_address=where.coordinator,
            num_processes=where.count,
            process_id=where.rank,
            initialization_timeout=timeout,
        )
    except Exception as error:
        raise DistributedError(
            f"Process {where.rank} of {where.count} could not join the coordinator at "
            f"{where.coordinator} within {timeout} s: {type(error).__name__}: {error}. "
            f"Check that every process was started and that {COORDINATOR_ENV} (or MASTER_ADDR) "
            "names a reachable address."
        ) from error


def ensure_joined(rank: int, count: int, host: str,
                  port: int = DEFAULT_COORDINATOR_PORT) -> None:
    """Make this process `rank` of a `count`-process job coordinated at `host:port`,
    unless it is already part of one (of `count` processes). A job of one process needs
    no coordinator: nothing is joined."""
    if not 0 <= rank < count:
        raise DistributedError(f"Process rank {rank} is not one of 0..{count - 1} "
                               f"(world size {count}).")
    if joined():
        if process_count() != count:
            raise DistributedError(
                f"This process already joined a job of {process_count()} processes, not "
                f"{count}; pass the world size it was started with.")
        return
    if count > 1:
        join(Topology(rank, count, rank, count, f"{host}:{port}"))


def joined() -> bool:
    from jax._src import distributed

    return distributed.global_state.client is not None


def leave() -> None:
    """Leave the job's coordination service; waits there until every process leaves."""
    if joined():
        import jax

        jax.distributed.shutdown()


def _store():
    from jax._src import distributed

    store = distributed.global_state.client
    if store is None:
        raise DistributedError("This process is not part of a multi-process job.")
    return store


def process_id() -> int:
    from jax._src import distributed

    return distributed.global_state.process_id


def process_count() -> int:
    from jax._src import distributed

    return distributed.global_state.num_processes


def collective_timeout() -> float:
    """`TORCH_XLA_COLLECTIVE_TIMEOUT` in seconds (read at each meeting), or the default."""
    text = os.environ.get(COLLECTIVE_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_COLLECTIVE_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise DistributedError(
            f"{COLLECTIVE_TIMEOUT_ENV}={text!r} is not a positive number of seconds; set one "
            f"(e.g. 600), or unset it for the default ({DEFAULT_COLLECTIVE_TIMEOUT:g} s)."
        )
    return value


def barrier(point: str, what: str | None = None, timeout_s: float | None = None) -> None:
    """Wait until every process reaches `point` as often as this one, or raise.

    Raises `PeerTimeoutError` naming the processes that did not arrive within `timeout_s`
    (default: `collective_timeout()`); `what` names the point in that message.
    """
    _meet(_store(), point, _next_generation(point), what or repr(point), timeout_s, None)


def exchange(
    tag: str, payload: bytes, timeout_s: float | None = None, what: str | None = None,
    ranks: list[int] | None = None,
) -> list[bytes]:
    """The `payload` for `tag` of every process in `ranks` (default: all), in that order.

    A barrier for those processes only: the others need not call it. Every process of
    `ranks` must pass the same list; a process outside it cannot take part.
    """
    store, rank = _store(), process_id()
    ranks = list(ranks) if ranks else None  # [] means every process, as in PyTorch/XLA
    members = _members(ranks, rank, tag)
    point = f"rendezvous/{tag}" if ranks is None else f"rendezvous/{tag}@{_key(members)}"
    generation = _next_generation(point)
    key = f"torch_xla/{point}/{generation}"
    store.key_value_set_bytes(f"{key}/{rank}", payload)
    _meet(store, point, generation, what or f"rendezvous {tag!r}", timeout_s,
          None if ranks is None else members)
    found = {_rank_of(k): value for k, value in store.key_value_dir_get_bytes(f"{key}/")}
    # Everyone has read the previous generation before arriving at this one.
    store.key_value_delete(f"torch_xla/{point}/{generation - 1}/{rank}")
    return [found[r] for r in members]


def _members(ranks: list[int] | None, rank: int, tag: str) -> list[int]:
    count = process_count()
    if ranks is None:
        return list(range(count))
    members = [int(r) for r in ranks]
    if sorted(set(members)) != sorted(members) or not all(0 <= r < count for r in members):
        raise DistributedError(
            f"Rendezvous {tag!r}: ranks {ranks} must be distinct processes of 0..{count - 1}."
        )
    if rank not in members:
        raise DistributedError(
            f"Process {rank} called rendezvous {tag!r} for processes {members}, which do not "
            "include it; only the listed processes may call it."
        )
    return members


def _key(members: list[int]) -> str:
    return ",".join(map(str, members))


def _next_generation(point: str) -> int:
    generation = _generations[point] = _generations.get(point, 0) + 1
    return generation


def _rank_of(key: str) -> int:
    return int(key.rsplit("/", 1)[1])


def _meet(store, point: str, generation: int, what: str, timeout_s: float | None,
          members: list[int] | None) -> None:
    """Wait at the coordinator's barrier for `point` (all processes, or `members`); on
    failure, name who did not arrive."""
    timeout = collective_timeout() if timeout_s is None else timeout_s
    # Marked before waiting: when the wait fails, the marks show who never came.
    marks = f"{_ARRIVED}/{point}"
    store.key_value_set_bytes(f"{marks}/{process_id()}", b"%d" % generation, allow_overwrite=True)
    start = time.monotonic()
    try:
        # One reusable barrier per point: the coordinator counts its rounds.
        store.wait_at_barrier(f"torch_xla/barrier/{point}", max(1, round(timeout * 1000)),
                              members)
    except Exception as error:  # jax's XlaRuntimeError; the message below says what happened
        waited = time.monotonic() - start
        everyone = members if members is not None else list(range(process_count()))
        raise _not_met(store, marks, generation, what, timeout, waited, error,
                       everyone) from error


def _not_met(
    store, marks: str, generation: int, what: str, timeout: float, waited: float,
    error: Exception, everyone: list[int],
) -> DistributedError:
    rank = process_id()
    failed = DistributedError(f"Process {rank} could not meet the others at {what}: {error}")
    try:
        reached = {_rank_of(k): int(v) for k, v in store.key_value_dir_get_bytes(f"{marks}/")}
    except Exception:  # noqa: BLE001 - the coordinator itself is gone; say what we know
        return failed
    missing = [r for r in everyone if reached.get(r, 0) < generation]
    if not missing and "DEADLINE_EXCEEDED" not in str(error):
        return failed
    if not missing:
        return PeerTimeoutError(
            f"Process {rank} reached {what} (its arrival #{generation} there) after the other "
            f"processes had stopped waiting for it: it came more than {timeout:g} s after "
            f"them. {_ADVICE}",
            [],
        )
    before = [reached.get(r, 0) for r in missing]
    return PeerTimeoutError(
        f"Process {rank} waited {waited:.1f} s at {what} (its arrival #{generation} there), "
        f"but process(es) {missing} did not arrive within {timeout:g} s (they had arrived "
        f"there {before} time(s)). {_ADVICE}",
        missing,
    )


_ADVICE = (
    "Every process must call the same rendezvous, mesh_reduce and collectives in the same "
    "order. If a missing process failed, its own error says why; if it is only slower "
    f"(loading data, compiling), raise {COLLECTIVE_TIMEOUT_ENV} (seconds, default "
    f"{DEFAULT_COLLECTIVE_TIMEOUT:g})."
)

