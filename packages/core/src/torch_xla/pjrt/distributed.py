"""Where this process sits in a multi-process job, and joining the job's coordinator.

A job is started either by `xmp.spawn` (which sets the `PJRT_*` variables below
in each child) or by another launcher such as torchrun (`LOCAL_RANK`,
`LOCAL_WORLD_SIZE`, `RANK`, `WORLD_SIZE`, `MASTER_ADDR`). Before its PJRT
client exists each process joins jax's distributed runtime (the coordination
service, hosted by process 0), so the client sees every device of the job and
collectives can span processes.
"""

from __future__ import annotations

import dataclasses
import os

# Set by xmp.spawn in each child (names as in PyTorch/XLA).
LOCAL_RANK_ENV = "PJRT_LOCAL_PROCESS_RANK"
LOCAL_COUNT_ENV = "PJRT_LOCAL_PROCESS_COUNT"
# host:port of the coordination service; xmp.spawn picks a free port.
COORDINATOR_ENV = "XLA_COORDINATOR_ADDRESS"
DEFAULT_COORDINATOR_PORT = 8547
# Seconds a process waits for the others to join before giving up.
JOIN_TIMEOUT_ENV = "XLA_COORDINATOR_TIMEOUT"
DEFAULT_JOIN_TIMEOUT = 120


# Rendezvous calls with the same tag are numbered, so a tag can be reused every step.
_generations: dict[str, int] = {}


class DistributedError(RuntimeError):
    """The multi-process environment is inconsistent; the message says which variable."""


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
    if local_rank is None or local_count is None:  # not under xmp.spawn: maybe torchrun
        local_rank, local_count = _int_env("LOCAL_RANK"), _int_env("LOCAL_WORLD_SIZE")
    if local_rank is None or local_count is None:
        return None
    rank, count = _int_env("RANK"), _int_env("WORLD_SIZE")
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


def joined() -> bool:
    from jax._src import distributed

    return distributed.global_state.client is not None


def _store():
    from jax._src import distributed

    store = distributed.global_state.client
    if store is None:
        raise DistributedError("This process is not part of a multi-process job.")
    return store


def process_id() -> int:
    from jax._src import distributed

    return distributed.global_state.process_id


def exchange(tag: str, payload: bytes, timeout_s: int = 600) -> list[bytes]:
    """Every process's `payload` for `tag`, in process order; a barrier for all processes."""
    from jax._src import distributed

    store = _store()
    rank, count = distributed.global_state.process_id, distributed.global_state.num_processes
    generation = _generations[tag] = _generations.get(tag, 0) + 1
    key = f"torch_xla/rendezvous/{tag}/{generation}"
    store.key_value_set_bytes(f"{key}/{rank}", payload)
    timeout_ms = timeout_s * 1000
    found = [store.blocking_key_value_get_bytes(f"{key}/{r}", timeout_ms) for r in range(count)]
    store.wait_at_barrier(f"{key}/read", timeout_ms)
    store.key_value_delete(f"{key}/{rank}")
    return found

