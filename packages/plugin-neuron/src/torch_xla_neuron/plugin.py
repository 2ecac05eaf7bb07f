"""`NeuronPlugin`: AWS NeuronCores through libneuronxla."""

from __future__ import annotations

import torch

from torch_xla.plugins import DevicePlugin, DtypePolicy, env_int
from torch_xla_neuron import library, topology

DENSE_GATHER_ENV = "XLA_DENSE_GATHER_FACTOR"


class NeuronPlugin(DevicePlugin):
    """AWS NeuronCores: one process per core under xmp.spawn."""

    priority = 100  # below TPU and CUDA, above the CPU

    def __init__(self, dev_root: str = "/dev") -> None:
        self.dev_root = dev_root  # tests point this at a fake /dev

    def library_path(self) -> str:
        return library.find_library()

    def physical_chip_count(self) -> int:
        return topology.core_count(self.dev_root)

    def configure_single_process(self) -> None:
        pass  # one process owning every visible core: the Neuron runtime's default

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        topology.configure_multiprocess(local_rank, local_world_size)

    # --- policies (PyTorch/XLA's Neuron special cases) ----------------------

    def dense_gather_factor(self) -> int:
        # As on TPU: dense unless the table has over ten times XLA_DENSE_GATHER_FACTOR rows.
        return 10 * env_int(DENSE_GATHER_ENV, 8192, minimum=0)

    def dtype_policy(self) -> DtypePolicy:
        # NeuronCores have neither 64-bit floats nor 16-bit integers.
        return DtypePolicy(f64_as_f32=True, s16_as_s32=True)

    def autocast_dtype(self) -> torch.dtype:
        return torch.bfloat16
