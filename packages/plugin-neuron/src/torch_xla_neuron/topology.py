"""NeuronCores of this host and the Neuron runtime variables that give one to each process."""

from __future__ import annotations

import glob
import os

from torch_xla.plugins import PluginError, env_int, env_text

NUM_DEVICES_ENV = "NEURONCORE_NUM_DEVICES"
VISIBLE_CORES_ENV = "NEURON_RT_VISIBLE_CORES"
ROOT_COMM_PORT = 62182  # the Neuron runtime's root communicator port, as in PyTorch/XLA


def core_count(dev_root: str = "/dev") -> int:
    """`NEURONCORE_NUM_DEVICES`, else 1 when a Neuron device node exists, else 0."""
    count = env_int(NUM_DEVICES_ENV, None, minimum=0)
    if count is not None:
        return count
    return 1 if glob.glob(os.path.join(dev_root, "neuron[0-9]*")) else 0


def parse_cores(text: str) -> list[int]:
    """`NEURON_RT_VISIBLE_CORES` syntax: '3', '0-3', '0,2,4-5'."""
    cores: list[int] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            first, _, last = part.partition("-")
            cores += range(int(first), int(last or first) + 1)
    except ValueError:
        raise PluginError(
            f"{VISIBLE_CORES_ENV}={text!r} is not a core list; use forms like 0-3 or 0,2,4-5."
        ) from None
    return cores


def multiprocess_env(local_rank: int, local_world_size: int) -> dict[str, str]:
    """One NeuronCore per process; ranks and sizes are global under torchrun (RANK/WORLD_SIZE)."""
    if not 0 <= local_rank < local_world_size:
        raise PluginError(f"Neuron process rank {local_rank} is outside 0..{local_world_size - 1}.")
    rank = env_int("RANK", local_rank, minimum=0)
    world = env_int("WORLD_SIZE", local_world_size, minimum=1)
    return {
        VISIBLE_CORES_ENV: str(_core_for(local_rank, local_world_size)),
        "NEURON_PJRT_PROCESS_INDEX": str(rank),
        "NEURON_PJRT_PROCESSES_NUM_DEVICES": ",".join(["1"] * world),
        "NEURON_PJRT_WORLD_SIZE": str(world),
    }


def _core_for(local_rank: int, local_world_size: int) -> int:
    """The core of `local_rank`: its index, or its entry of a user's visible-core list."""
    text = env_text(VISIBLE_CORES_ENV)
    if text is None:
        return local_rank
    cores = parse_cores(text)
    if len(cores) < local_world_size:
        raise PluginError(
            f"{VISIBLE_CORES_ENV}={text!r} lists {len(cores)} core(s) for "
            f"{local_world_size} processes; list at least one core per process."
        )
    return cores[local_rank]


def root_comm_id() -> str:
    return f"{os.environ.get('MASTER_ADDR', 'localhost')}:{ROOT_COMM_PORT}"


def configure_multiprocess(local_rank: int, local_world_size: int) -> None:
    """Give this process its core; a user's NEURON_RT_ROOT_COMM_ID is kept."""
    os.environ.update(multiprocess_env(local_rank, local_world_size))
    os.environ.setdefault("NEURON_RT_ROOT_COMM_ID", root_comm_id())
