"""The one PJRT client of this process, built from the active plugin.

Everything that touches devices goes through `client()`: device lists,
host<->device transfers and compilation. The client is created lazily, the
first time something needs a device, after the plugin has configured the
process; from then on the device type is fixed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from torch_xla import _metrics
from torch_xla.pjrt import cache as compile_cache
from torch_xla.pjrt import distributed
from torch_xla.plugins import registry
from torch_xla.plugins.base import DevicePlugin


class XlaRuntimeError(RuntimeError):
    """The runtime cannot do what was asked; the message says why and what to do."""


class Client:
    """Devices, transfers and compilation for one plugin, over jax's PJRT client."""

    def __init__(self, name: str, plugin: DevicePlugin) -> None:
        self.name = name  # canonical device type, e.g. "CPU"
        self.plugin = plugin
        self.platform = _configure_platform(name, plugin)
        try:
            self.devices: list[jax.Device] = jax.local_devices(backend=self.platform)
            self.global_devices: list[jax.Device] = jax.devices(self.platform)
        except Exception as error:
            reason = f"{type(error).__name__}: {error}"
            if isinstance(error, AssertionError) or not str(error).strip():
                reason = f"jax created no backend for platform {self.platform!r} ({reason})"
            raise XlaRuntimeError(
                f"The {name} plugin ({plugin!r}) could not create its PJRT client: {reason}. "
                "Check that the device is present and its driver works, or choose another "
                "device with PJRT_DEVICE."
            ) from error
        self.compiled_once = False

    # --- topology -----------------------------------------------------------

    def device(self, index: int) -> jax.Device:
        if not 0 <= index < len(self.devices):
            raise XlaRuntimeError(
                f"xla:{index} does not exist: this process has {len(self.devices)} "
                f"{self.name} device(s), xla:0 to xla:{len(self.devices) - 1}."
            )
        return self.devices[index]

    def process_index(self) -> int:
        return jax.process_index(backend=self.platform)

    def process_count(self) -> int:
        return jax.process_count(backend=self.platform)

    # --- transfers ----------------------------------------------------------

    def to_device(self, array: np.ndarray, index: int = 0) -> jax.Array:
        with _metrics.timed("TransferToDeviceTime"):
            return jax.device_put(array, self.device(index))

    def to_host(self, array: jax.Array) -> np.ndarray:
        with _metrics.timed("TransferFromDeviceTime"):
            return np.asarray(array)

    # --- compilation --------------------------------------------------------

    def compile(self, key: str | None, fn: Callable[..., Any], *args: Any) -> Any:
        """Compile `fn` for `args`; with a persistent cache, `key` names the entry."""
        self.compiled_once = True
        cached = compile_cache.load(key) if key is not None else None
        if cached is not None:
            _metrics.counter("PersistentCacheHit").inc()
            return cached
        start = time.perf_counter()
        compiled = jax.jit(fn).lower(*args).compile()
        _metrics.metric("CompileTime").add(time.perf_counter() - start)
        if key is not None:
            compile_cache.store(key, compiled)
        return compiled


def _configure_platform(name: str, plugin: DevicePlugin) -> str:
    """Run the plugin's process set-up and make jax use only its platform."""
    if not plugin.hardware_present():
        raise XlaRuntimeError(
            f"The {name} plugin ({plugin!r}) found no {name} hardware on this host "
            f"(physical_chip_count() = {plugin.physical_chip_count()}). Run on a machine "
            "with that device, or choose another device with PJRT_DEVICE "
            "(`torch-xla plugins` lists what is installed and present)."
        )
    where = distributed.topology()
    if where is not None:
        plugin.configure_multiprocess(where.local_rank, where.local_count)
    else:
        plugin.configure_single_process()
    library = plugin.library_path()
    if library is not None:
        platform = name.lower()
        if not os.path.isfile(library):
            raise XlaRuntimeError(
                f"The {name} plugin ({plugin!r}) names the PJRT library {library!r}, "
                "which does not exist. Reinstall the plugin package or fix the path it reads."
            )
        from jax._src import xla_bridge

        xla_bridge.register_plugin(
            platform, library_path=library, options=plugin.client_create_options()
        )
    else:
        platform = plugin.jax_platform()
        if platform is None:
            raise XlaRuntimeError(
                f"The {name} plugin ({plugin!r}) returned no library_path() and no "
                "jax_platform(); a plugin must name one of them."
            )
    # Only the chosen platform initialises: other installed PJRT packages
    # must not probe for hardware that this process does not use.
    jax.config.update("jax_platforms", platform)
    jax.config.update("jax_enable_x64", True)  # torch's int64/float64 need it
    if where is not None and where.count > 1 and plugin.requires_xla_coordinator():
        distributed.join(where)  # before the backend exists: it then sees the whole job
    return platform


_client: Client | None = None
_lock = threading.Lock()
# Called with the client right after it is created: layers above the runtime
# apply the active plugin's policies here without the runtime importing them.
_start_callbacks: list[Callable[[Client], None]] = []


def on_start(callback: Callable[[Client], None]) -> None:
    """Call `callback(client)` when the client starts (at once if it has)."""
    _start_callbacks.append(callback)
    if _client is not None:
        callback(_client)


def client() -> Client:
    """The process's client, created from the active plugin on first use."""
    global _client
    if _client is None:
        with _lock:
            if _client is None:
                chosen = registry.active()
                assert chosen.plugin is not None
                started_client = Client(chosen.name, chosen.plugin)
                for callback in _start_callbacks:
                    callback(started_client)
                _client = started_client
    return _client


def started() -> Client | None:
    """The client if it exists, without creating it."""
    return _client
