"""`CudaPlugin`: NVIDIA GPUs through jax's CUDA PJRT library."""

from __future__ import annotations

from typing import Any

import torch

from torch_xla.plugins import DevicePlugin, PluginError, env_flag, env_fraction, env_int
from torch_xla_cuda import devices, library

FRACTION_ENV = "PJRT_ALLOCATOR_FRACTION"
PREALLOCATE_ENV = "PJRT_ALLOCATOR_PREALLOCATE"
CUDA_ASYNC_ENV = "PJRT_ALLOCATOR_CUDA_ASYNC"


class CudaPlugin(DevicePlugin):
    """NVIDIA GPUs: one process per GPU under xmp.spawn, or one process owning all."""

    priority = 200  # below TPU, above Neuron and the CPU

    def __init__(
        self, driver_gpus: str = devices.DRIVER_GPUS, nvidia_smi: str = "nvidia-smi"
    ) -> None:
        self.driver_gpus = driver_gpus  # tests point these at fake driver listings
        self.nvidia_smi = nvidia_smi
        self.local_rank = 0
        self.local_world_size = 1

    def library_path(self) -> str:
        return library.find_library()

    def physical_chip_count(self) -> int:
        return devices.count_gpus(self.driver_gpus, self.nvidia_smi)

    def configure_single_process(self) -> None:
        self.local_rank, self.local_world_size = 0, 1
        library.keep_jax_from_registering_it()

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        if not 0 <= local_rank < local_world_size:
            raise PluginError(
                f"CUDA process rank {local_rank} is outside 0..{local_world_size - 1}."
            )
        self.local_rank, self.local_world_size = local_rank, local_world_size
        library.keep_jax_from_registering_it()

    def register_library(self, platform: str, library_path: str, options: dict[str, Any]) -> None:
        library.register(platform, library_path, options)  # through jax's own set-up

    def client_create_options(self) -> dict[str, Any]:
        """Options of the CUDA PJRT client (names as XLA's pjrt_c_api_gpu_internal.cc)."""
        options: dict[str, Any] = {
            "platform_name": "cuda",
            "allocator": "cuda_async" if env_flag(CUDA_ASYNC_ENV) else "default",
        }
        fraction = env_fraction(FRACTION_ENV)
        if fraction is not None:
            options["memory_fraction"] = fraction
        preallocate = env_flag(PREALLOCATE_ENV, default=None)
        if preallocate is not None:
            options["preallocate"] = preallocate
        if self.local_world_size > 1:  # each process owns one GPU; alone, it uses all
            options["visible_devices"] = [self.local_rank]
        return options

    def world_size(self) -> int:
        """Processes in the whole job: `WORLD_SIZE` (torchrun, multi-host), else this host's
        (known after `configure_multiprocess`, or from xmp.spawn's variable before it)."""
        local = env_int("PJRT_LOCAL_PROCESS_COUNT", self.local_world_size, minimum=1)
        return env_int("WORLD_SIZE", local, minimum=1)

    def requires_xla_coordinator(self) -> bool:
        return self.world_size() > 1  # GPUs of several processes meet through the coordinator

    # --- policies (PyTorch/XLA's GPU special cases) -------------------------

    def rng_algorithm(self) -> str:
        return "philox"  # XLA:GPU's fast counter-based generator, PyTorch/XLA's GPU default

    def autocast_dtype(self) -> torch.dtype:
        return torch.float16  # as torch.autocast('cuda')
