"""torch-xla plugin for the host CPU (jaxlib's built-in PJRT CPU client).

`CPU_NUM_DEVICES` sets how many CPU devices one process sees (default 1).
Under `xmp.spawn` each process owns one CPU device, and collectives between
processes run over gloo. With `CPU_DEVICES_PER_PROCESS=k` (default 1) each
spawned process drives k of the CPU_NUM_DEVICES devices instead, one thread per
device (as TPU v2/v3 hosts do), so `xmp.spawn` starts CPU_NUM_DEVICES / k
processes; `CPU_DEVICES_PER_PROCESS=all` is PyTorch/XLA's CPU behaviour: one
process, one thread per device.
"""

from __future__ import annotations

import os

from torch_xla.plugins import DevicePlugin, PluginError, env_int

__version__ = "0.1.0"

NUM_DEVICES_ENV = "CPU_NUM_DEVICES"
PER_PROCESS_ENV = "CPU_DEVICES_PER_PROCESS"


def num_devices() -> int:
    return env_int(NUM_DEVICES_ENV, 1, minimum=1)


def devices_per_process() -> int:
    """CPU_DEVICES_PER_PROCESS (default 1; `all`: CPU_NUM_DEVICES), checked to divide
    CPU_NUM_DEVICES."""
    total = num_devices()
    if (os.environ.get(PER_PROCESS_ENV) or "").strip().lower() == "all":
        return total
    per_process = env_int(PER_PROCESS_ENV, 1, minimum=1)
    if total % per_process:
        raise PluginError(
            f"{PER_PROCESS_ENV}={per_process} does not divide {NUM_DEVICES_ENV}={total}: "
            "every spawned process drives the same number of CPU devices. Choose a divisor "
            f"of {total} or `all`, or unset {PER_PROCESS_ENV} for one device per process."
        )
    return per_process


class CpuPlugin(DevicePlugin):
    """The host CPU: always present, chosen last when PJRT_DEVICE is unset."""

    priority = -100  # a fallback: any accelerator that is present wins

    def library_path(self) -> None:
        return None  # jaxlib builds the CPU client in

    def jax_platform(self) -> str:
        return "cpu"

    def physical_chip_count(self) -> int:
        return num_devices() // devices_per_process()  # one process per "chip"

    def devices_per_process(self) -> int:
        return devices_per_process()

    def hardware_present(self) -> bool:
        return True

    def configure_single_process(self) -> None:
        import jax

        jax.config.update("jax_num_cpu_devices", num_devices())

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        import jax

        jax.config.update("jax_num_cpu_devices", devices_per_process())
        jax.config.update("jax_cpu_collectives_implementation", "gloo")

    def requires_xla_coordinator(self) -> bool:
        return True  # several CPU processes form one job through the coordinator
