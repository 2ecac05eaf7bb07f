"""torch-xla plugin for the host CPU (jaxlib's built-in PJRT CPU client).

`CPU_NUM_DEVICES` sets how many CPU devices one process sees (default 1).
Under `xmp.spawn` each process owns one CPU device, and collectives between
processes run over gloo.
"""

from __future__ import annotations

from torch_xla.plugins import DevicePlugin, env_int

__version__ = "0.1.0"

NUM_DEVICES_ENV = "CPU_NUM_DEVICES"


def num_devices() -> int:
    return env_int(NUM_DEVICES_ENV, 1, minimum=1)


class CpuPlugin(DevicePlugin):
    """The host CPU: always present, chosen last when PJRT_DEVICE is unset."""

    priority = -100  # a fallback: any accelerator that is present wins

    def library_path(self) -> None:
        return None  # jaxlib builds the CPU client in

    def jax_platform(self) -> str:
        return "cpu"

    def physical_chip_count(self) -> int:
        return num_devices()

    def hardware_present(self) -> bool:
        return True

    def configure_single_process(self) -> None:
        import jax

        jax.config.update("jax_num_cpu_devices", num_devices())

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        import jax

        jax.config.update("jax_num_cpu_devices", 1)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")

    def requires_xla_coordinator(self) -> bool:
        return True  # several CPU processes form one job through the coordinator
