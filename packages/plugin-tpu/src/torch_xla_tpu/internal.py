"""PyTorch/XLA's `torch_xla._internal.tpu` helpers, provided by this plugin.

The core names no vendor; it finds this module through the entry point
``torch_xla.internal_modules: tpu`` (see `torch_xla.plugins.modules`), so
`from torch_xla._internal import tpu` works wherever this package is installed.
Nothing here needs a TPU to import: chips are read from sysfs, settings from the
environment.
"""

from __future__ import annotations

import os

from torch_xla.plugins import PluginError
from torch_xla_tpu import topology


def num_available_chips() -> int:
    """TPU chips on this host's PCI bus."""
    return topology.find_chips().count


def num_available_devices() -> int:
    """PJRT devices those chips provide (two per chip on v2/v3)."""
    return topology.find_chips().devices


def num_local_processes() -> int:
    """Processes `xmp.spawn` starts on this host: one per chip (capped by TPU_PROCESS_BOUNDS)."""
    chips = num_available_chips()
    allowed = topology.process_bounds_size()
    return chips if allowed is None else min(chips, allowed)


def version() -> int:
    """The TPU generation's major version (2 to 7), from the chips on the PCI bus."""
    generation = topology.find_chips().generation
    if generation is None:
        raise PluginError("No TPU chips on this host's PCI bus, so no TPU version: run on a "
                          "TPU VM (or check that /sys/bus/pci/devices is visible).")
    digits = "".join(c for c in generation.name.split("/")[-1] if c.isdigit())
    if not digits:
        raise PluginError(f"The TPU generation {generation.name!r} has no version number.")
    return int(digits)


def worker_id() -> int:
    """This host's index in a multi-host slice (TPU_WORKER_ID, default 0)."""
    return topology.worker_id()


def task_id() -> int | None:
    """This process's task id (CLOUD_TPU_TASK_ID), set once the topology is configured."""
    text = os.environ.get("CLOUD_TPU_TASK_ID")
    return int(text) if text else None


def configure_one_chip_topology() -> None:
    """One process owning chip 0 (the user's own settings win)."""
    topology.configure_single_process()


def configure_topology(local_rank: int, local_world_size: int, base_port: int = 8476) -> None:
    """The libtpu variables for process `local_rank` of `local_world_size` on this host."""
    if base_port != topology.BASE_PORT:
        raise PluginError(f"base_port={base_port}: this plugin uses the fixed base port "
                          f"{topology.BASE_PORT}, as PyTorch/XLA does by default.")
    topology.configure_multiprocess(local_rank, local_world_size,
                                    topology.find_chips().generation)


def discover_master_worker_ip() -> str:
    """The first worker's host name (TPU_WORKER_HOSTNAMES), `localhost` on one host."""
    return topology.worker_hostnames()[0]
