"""The contract between the core and a device plugin.

A plugin tells the core where its PJRT library is, how many chips the machine
has, how to split them across processes, and the few device policies that
PyTorch/XLA used to hard-code per device type. Everything has a documented
default except the two questions only the vendor can answer.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class DtypePolicy:
    """How PyTorch dtypes are stored on the device.

    Tensors always report their PyTorch dtype; these flags only change the
    type the device stores and computes in.
    """

    # Store float64 as float32 (devices without 64-bit floats).
    f64_as_f32: bool = False
    # Store int16/uint16 as int32 (devices without 16-bit integers).
    s16_as_s32: bool = False
    # Store float32 as bfloat16 (devices whose fast path is bf16 only).
    f32_as_bf16: bool = False


class DevicePlugin(abc.ABC):
    """A device family reachable through PJRT.

    Subclass it, answer `library_path` and `physical_chip_count`, override the
    rest where the defaults do not fit, and declare the class under the
    entry-point group ``torch_xla.plugins``.
    """

    # Auto-selection order when PJRT_DEVICE is unset: the highest priority
    # whose hardware is present wins. Accelerators use positive values; a
    # host fallback such as a CPU plugin uses a negative one so it comes last.
    priority: int = 0

    # --- required ---------------------------------------------------------

    @abc.abstractmethod
    def library_path(self) -> str | None:
        """Path of the PJRT C API shared library, or None to use `jax_platform()`.

        None means the platform is built into jaxlib (the CPU client); any
        other plugin returns the `.so` that jax loads by path.
        """

    @abc.abstractmethod
    def physical_chip_count(self) -> int:
        """Chips on this host, found without creating a PJRT client (0 if none)."""

    # --- runtime set-up (all run before the PJRT client exists) -----------

    def jax_platform(self) -> str | None:
        """Name of the jaxlib built-in platform, for plugins without a library."""
        return None

    def hardware_present(self) -> bool:
        """Whether this host can run the plugin; drives automatic selection."""
        return self.physical_chip_count() > 0

    def host_index(self) -> int:
        """Index of this host among all hosts of a multi-host job."""
        return 0

    def configure_single_process(self) -> None:
        """Set up the environment for one process owning every local device."""

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        """Set up the environment for process `local_rank` of `local_world_size` on this host."""

    def client_create_options(self) -> dict[str, Any]:
        """Options passed to the PJRT client at creation (`PJRT_Client_Create`)."""
        return {}

    def register_library(self, platform: str, library_path: str, options: dict[str, Any]) -> None:
        """Register `library_path` with jax as `platform`, the client to be created with
        `options` (those of `client_create_options()`).

        The default is jax's plain `register_plugin`. A plugin overrides it where the
        vendor's jax package does more around that call that compiled programs need, such
        as loading the vendor's runtime libraries or registering custom-call handlers with
        the library's C API (jax's CUDA package does both); it must still register
        exactly once, under `platform`, with these options.
        """
        from jax._src import xla_bridge  # jax loads only when a client is being created

        xla_bridge.register_plugin(platform, library_path=library_path, options=options)

    def requires_xla_coordinator(self) -> bool:
        """Whether several processes must join the distributed coordination service."""
        return False

    def devices_per_process(self) -> int:
        """Devices each process drives under `xmp.spawn` (after `configure_multiprocess`).

        1 (the default): one process per chip, one device each. More (TPU v2/v3: the two
        cores of a chip) makes `xmp.spawn` run `fn` in one thread per device of each
        process; the process's PJRT client must then show exactly that many devices.
        """
        return 1

    # --- device policies ----------------------------------------------------

    def dense_gather_factor(self) -> int:
        """Gathers from tables with at most this many rows lower to a dense one-hot matmul.

        0 (the default) always uses XLA's sparse gather.
        """
        return 0

    def rng_algorithm(self) -> str:
        """Random bit generator used for random ops: 'default', 'threefry' or 'philox'."""
        return "default"

    def dtype_policy(self) -> DtypePolicy:
        """How 64-bit and 16-bit types are stored; see `DtypePolicy`."""
        return DtypePolicy()

    def autocast_dtype(self) -> torch.dtype:
        """The lower-precision dtype `torch.autocast('xla')` uses by default."""
        return torch.bfloat16

    def __repr__(self) -> str:
        return f"{type(self).__module__}.{type(self).__qualname__}()"


POLICY_METHODS = ("dense_gather_factor", "rng_algorithm", "dtype_policy", "autocast_dtype")
RNG_ALGORITHMS = ("default", "threefry", "philox")
