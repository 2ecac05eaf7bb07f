"""`TpuPlugin`: Cloud TPU chips through libtpu."""

from __future__ import annotations

import os
from typing import Any

import torch

from torch_xla.plugins import DevicePlugin, DtypePolicy, env_int
from torch_xla_tpu import library, topology

MAX_INFLIGHT_ENV = "XLA_TPU_MAX_INFLIGHT_COMPUTATIONS"
DENSE_GATHER_ENV = "XLA_DENSE_GATHER_FACTOR"


class TpuPlugin(DevicePlugin):
    """Cloud TPU: libtpu's PJRT library, chips counted on the PCI bus."""

    priority = 300  # above every other accelerator: a TPU host has nothing faster

    def __init__(self, sysfs_root: str | os.PathLike = topology.SYSFS_PCI_DEVICES) -> None:
        self.sysfs_root = sysfs_root  # tests point this at fake PCI trees

    def library_path(self) -> str:
        return library.find_library()

    def local_chips(self) -> topology.LocalChips:
        return topology.find_chips(self.sysfs_root)

    def physical_chip_count(self) -> int:
        """TPU chips on the PCI bus, capped by the processes `TPU_PROCESS_BOUNDS` allows."""
        chips = self.local_chips().count
        allowed = topology.process_bounds_size()
        return chips if allowed is None else min(chips, allowed)

    def hardware_present(self) -> bool:
        return self.local_chips().count > 0

    def host_index(self) -> int:
        return topology.worker_id()

    def configure_single_process(self) -> None:
        topology.configure_single_process()

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        generation = self.local_chips().generation
        topology.configure_multiprocess(local_rank, local_world_size, generation)

    def client_create_options(self) -> dict[str, Any]:
        from torch_xla.version import __version__

        return {
            "max_inflight_computations": env_int(MAX_INFLIGHT_ENV, 4, minimum=1),
            "ml_framework_name": "PyTorch/XLA",
            "ml_framework_version": __version__,
        }

    # --- policies (PyTorch/XLA's TPU special cases) -------------------------

    def dense_gather_factor(self) -> int:
        # PyTorch/XLA gathers densely unless the table has more than ten times
        # XLA_DENSE_GATHER_FACTOR rows: TPUs gather single elements slowly.
        return 10 * env_int(DENSE_GATHER_ENV, 8192, minimum=0)

    def dtype_policy(self) -> DtypePolicy:
        return DtypePolicy(f64_as_f32=True)  # TPUs have no 64-bit floating point unit

    def autocast_dtype(self) -> torch.dtype:
        return torch.bfloat16
