"""The TPU chips of this host, and the libtpu environment that splits them across processes.

Chips are counted from the PCI devices in sysfs, never by creating a client:
asking libtpu would open the chips and lock them for this process.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

from torch_xla.plugins import PluginError, env_int

SYSFS_PCI_DEVICES = "/sys/bus/pci/devices"
GOOGLE_PCI_VENDOR_ID = "0x1ae0"
BASE_PORT = 8476  # first TPU_PROCESS_PORT of a host, as in PyTorch/XLA


@dataclasses.dataclass(frozen=True)
class Generation:
    name: str
    # PJRT devices per chip: v2/v3 expose each of a chip's two TensorCores as
    # its own device; later chips fuse them (megacore) or have one core.
    cores_per_chip: int
    # libtpu takes the chip/process bounds variables from v4 on; PyTorch/XLA
    # never set them on v2/v3, so neither do we.
    takes_bounds: bool


# PCI device id -> generation (vendor 0x1ae0). v2 and v3 share one id.
GENERATIONS: dict[str, Generation] = {
    "0x0027": Generation("v2/v3", cores_per_chip=2, takes_bounds=False),
    "0x0056": Generation("plc", cores_per_chip=1, takes_bounds=True),
    "0x005e": Generation("v4", cores_per_chip=1, takes_bounds=True),
    "0x0062": Generation("v5p", cores_per_chip=1, takes_bounds=True),
    "0x0063": Generation("v5e", cores_per_chip=1, takes_bounds=True),
    "0x006f": Generation("v6e", cores_per_chip=1, takes_bounds=True),
    "0x0076": Generation("tpu7x", cores_per_chip=1, takes_bounds=True),  # unverified here
}

# Chips of one host laid out as libtpu's 3-D bounds, by chips per host.
HOST_CHIP_GRIDS: dict[int, tuple[int, int, int]] = {
    1: (1, 1, 1),
    2: (1, 2, 1),
    4: (2, 2, 1),
    8: (2, 4, 1),
}


@dataclasses.dataclass(frozen=True)
class LocalChips:
    """The TPU chips found on this host's PCI bus."""

    count: int
    generation: Generation | None  # None when there are no chips

    @property
    def devices(self) -> int:
        """PJRT devices the chips provide (twice the chips on v2/v3)."""
        return self.count * self.generation.cores_per_chip if self.generation else 0


def find_chips(sysfs_root: str | os.PathLike = SYSFS_PCI_DEVICES) -> LocalChips:
    """Count the PCI devices under `sysfs_root` with Google's vendor id and a TPU device id."""
    found = [_generation_of(device) for device in sorted(Path(sysfs_root).glob("*"))]
    chips = [generation for generation in found if generation is not None]
    return LocalChips(len(chips), chips[0] if chips else None)


def _generation_of(device: Path) -> Generation | None:
    try:
        vendor = (device / "vendor").read_text().strip()
        if vendor != GOOGLE_PCI_VENDOR_ID:
            return None
        return GENERATIONS.get((device / "device").read_text().strip())
    except OSError:  # not a PCI function directory, or unreadable: not a TPU
        return None


# --- environment ------------------------------------------------------------


def parse_bounds(name: str, text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    try:
        bounds = tuple(int(part) for part in parts)
    except ValueError:
        bounds = ()
    if len(bounds) != 3 or min(bounds) < 1:
        raise PluginError(
            f"{name}={text!r} is not three positive integers. Use the form {name}=2,2,1."
        )
    x, y, z = bounds
    return x, y, z


def bounds_from_env(name: str) -> tuple[int, int, int] | None:
    text = os.environ.get(name)
    return None if text is None else parse_bounds(name, text)


def process_bounds_size() -> int | None:
    """Processes that `TPU_PROCESS_BOUNDS` allows on this slice, or None when unset."""
    bounds = bounds_from_env("TPU_PROCESS_BOUNDS")
    return None if bounds is None else math.prod(bounds)


def worker_id() -> int:
    """This host's index in a multi-host slice (`TPU_WORKER_ID`, default 0)."""
    return env_int("TPU_WORKER_ID", 0, minimum=0)


def worker_hostnames() -> list[str]:
    text = os.environ.get("TPU_WORKER_HOSTNAMES", "")
    hosts = [host.strip() for host in text.split(",") if host.strip()]
    return hosts or ["localhost"]


def configure_single_process() -> None:
    """One process owns chip 0 of a one-process slice (user values win)."""
    os.environ.setdefault("TPU_VISIBLE_CHIPS", "0")
    os.environ.setdefault("TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1")
    os.environ.setdefault("TPU_PROCESS_BOUNDS", "1,1,1")


def multiprocess_env(
    local_rank: int, local_world_size: int, generation: Generation | None
) -> dict[str, str]:
    """The libtpu variables for process `local_rank` of `local_world_size`, one chip each."""
    if not 0 <= local_rank < local_world_size:
        raise PluginError(
            f"TPU process rank {local_rank} is outside 0..{local_world_size - 1} "
            f"(local_world_size={local_world_size})."
        )
    ports = [BASE_PORT + rank for rank in range(local_world_size)]
    env = {
        "TPU_VISIBLE_CHIPS": str(local_rank),
        "TPU_PROCESS_PORT": str(ports[local_rank]),
        "TPU_PROCESS_ADDRESSES": ",".join(
            f"{host}:{port}" for host in worker_hostnames() for port in ports
        ),
        "CLOUD_TPU_TASK_ID": str(worker_id() * local_world_size + local_rank),
    }
    if generation is None or generation.takes_bounds:
        env["TPU_CHIPS_PER_PROCESS_BOUNDS"] = "1,1,1"
        if "TPU_PROCESS_BOUNDS" not in os.environ:  # the user's bounds win, unchecked
            env["TPU_PROCESS_BOUNDS"] = ",".join(map(str, process_bounds(local_world_size)))
    return env


def process_bounds(local_world_size: int) -> tuple[int, int, int]:
    """One process per chip: the host's chip grid times the slice's host bounds."""
    host_grid = bounds_from_env("TPU_CHIPS_PER_HOST_BOUNDS") or HOST_CHIP_GRIDS.get(
        local_world_size
    )
    if host_grid is None:
        raise PluginError(
            f"Cannot lay out {local_world_size} TPU processes on one host: known host "
            f"layouts are for {sorted(HOST_CHIP_GRIDS)} chips. Set TPU_CHIPS_PER_HOST_BOUNDS "
            "(for example 2,2,1) or TPU_PROCESS_BOUNDS yourself."
        )
    hosts = bounds_from_env("TPU_HOST_BOUNDS") or (1, 1, 1)
    x, y, z = (chips * count for chips, count in zip(host_grid, hosts, strict=True))
    return x, y, z


def configure_multiprocess(
    local_rank: int, local_world_size: int, generation: Generation | None
) -> None:
    """Set the libtpu variables for this process, keeping any the user already set."""
    for name, value in multiprocess_env(local_rank, local_world_size, generation).items():
        os.environ.setdefault(name, value)
