"""`TemplatePlugin`: every method a vendor fills in, working against a stand-in library.

Vendors: change the constants below, then each method marked VENDOR.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch

from torch_xla.plugins import DevicePlugin, DtypePolicy, PluginError, env_file, env_int

# --- VENDOR: names of your device and library ----------------------------------
LIBRARY_ENV = "TEMPLATE_LIBRARY_PATH"  # lets users point at another build of the library
LIBRARY_PACKAGE = "lammps_jax_pjrt_cpu"  # importable package that ships the library ...
LIBRARY_FILE = "pjrt_c_api_cpu_plugin.so"  # ... as this file in its directory
LIBRARY_DISTRIBUTION = "lammps-jax-pjrt-cpu"  # what `pip install` needs for it
NUM_DEVICES_ENV = "TEMPLATE_NUM_DEVICES"  # stand-in only: how many CPU devices to expose


def find_library() -> str:
    """`LIBRARY_ENV` if set, else `LIBRARY_FILE` inside the installed `LIBRARY_PACKAGE`."""
    override = env_file(
        LIBRARY_ENV, expected=LIBRARY_FILE, fallback=f"the one from {LIBRARY_DISTRIBUTION}"
    )
    if override:
        return override
    directory = package_directory(LIBRARY_PACKAGE)
    if directory is None:
        raise PluginError(
            f"No PJRT library: the package {LIBRARY_PACKAGE!r} is not installed. Run "
            f"`pip install {LIBRARY_DISTRIBUTION}`, or set {LIBRARY_ENV} to {LIBRARY_FILE}."
        )
    path = os.path.join(directory, LIBRARY_FILE)
    if not os.path.isfile(path):
        raise PluginError(
            f"{LIBRARY_PACKAGE} is installed at {directory} but has no {LIBRARY_FILE}. "
            f"Reinstall it: `pip install --force-reinstall {LIBRARY_DISTRIBUTION}`."
        )
    return path


def package_directory(package: str) -> str | None:
    """Where an installed package lives, found without importing (and so running) it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def device_count() -> int:
    """VENDOR: count your chips without creating a client (sysfs, /dev nodes, the driver).

    The stand-in's hardware is the host CPU: `TEMPLATE_NUM_DEVICES` devices, default 1.
    """
    return env_int(NUM_DEVICES_ENV, 1, minimum=0)


class TemplatePlugin(DevicePlugin):
    """A PJRT C API library at a path (stand-in: jaxlib's CPU plugin as a separate .so)."""

    # VENDOR: raise this. Automatic selection (PJRT_DEVICE unset) picks the highest
    # priority whose hardware is present; at -1000 the template loses even to the
    # CPU plugin (-100), so it only runs when asked for with PJRT_DEVICE=TEMPLATE.
    priority = -1000

    def __init__(self) -> None:
        self.devices_per_process = device_count()

    def library_path(self) -> str:
        return find_library()

    def physical_chip_count(self) -> int:
        return device_count()

    def configure_single_process(self) -> None:
        # VENDOR: set what your runtime reads before the client exists (visible devices...).
        self.devices_per_process = device_count()

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        # VENDOR: give process `local_rank` its own device, e.g. a visible-devices variable.
        if not 0 <= local_rank < local_world_size:
            raise PluginError(f"Process rank {local_rank} is outside 0..{local_world_size - 1}.")
        self.devices_per_process = 1

    def client_create_options(self) -> dict[str, Any]:
        # VENDOR: your library's PJRT_Client_Create options; unknown names are rejected.
        return {"cpu_device_count": self.devices_per_process}

    def requires_xla_coordinator(self) -> bool:
        # VENDOR: True if several processes must meet in jax's coordination service.
        return False

    # --- VENDOR: device policies; the defaults suit most devices ------------------

    def dense_gather_factor(self) -> int:
        return 0  # always XLA's gather; raise it if single-element gathers are slow

    def rng_algorithm(self) -> str:
        return "default"

    def dtype_policy(self) -> DtypePolicy:
        return DtypePolicy()  # e.g. DtypePolicy(f64_as_f32=True) without 64-bit floats

    def autocast_dtype(self) -> torch.dtype:
        return torch.bfloat16
