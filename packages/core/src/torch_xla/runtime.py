"""`torch_xla.runtime` (imported as `xr`): which device this process runs on, and its topology.

Names and meaning follow PyTorch/XLA. "Addressable" devices are the ones this
process drives; "local" ones are all devices of this host (every process on
it); "global" ones are all devices of the job.
"""

from __future__ import annotations

import os
import socket
import warnings

import torch

import torch_xla
from torch_xla.core import xla_env_vars as xenv
from torch_xla.lazy import replicas, tensor
from torch_xla.pjrt import cache as compile_cache
from torch_xla.pjrt import distributed, spmd, threads
from torch_xla.pjrt.client import XlaRuntimeError, client, started
from torch_xla.plugins import registry


def device_type() -> str | None:
    """The device type (upper-case plugin name) this process uses or will use.

    As in PyTorch/XLA, PJRT_DEVICE decides when it is set; otherwise the device the
    runtime started with, or the plugin that automatic selection picks (without
    starting it). With PJRT_SELECT_DEFAULT_DEVICE=0 and no PJRT_DEVICE: None.
    """
    requested = os.environ.get(xenv.PJRT_DEVICE, "").strip().upper()
    if requested:
        known = {r.name for r in registry.records()}
        # PyTorch/XLA drops a suffix after "_" (e.g. CPU_SPECIAL); plugin names may hold one
        return requested if requested in known else requested.split("_")[0]
    if os.environ.get(xenv.PJRT_SELECT_DEFAULT_DEVICE, "1") == "0":
        return None
    running = started()
    return running.name if running is not None else registry.active().name


def set_device_type(pjrt_device: str) -> None:
    """Choose the device type; only possible before the runtime has started."""
    wanted = registry.canonical_name(pjrt_device)
    if torch_xla._XLAC._xla_runtime_is_initialized() and device_type() != wanted:
        raise XlaRuntimeError(
            f"Cannot switch to device type {pjrt_device!r}: the runtime already started "
            f"with {device_type()!r}. Set PJRT_DEVICE before the first use of a device, "
            "or call set_device_type() earlier."
        )
    registry.set_active(pjrt_device)


def using_pjrt() -> bool:
    return True


world_size = replicas.world_size


def global_ordinal() -> int:
    """Ordinal of the calling thread's device among all devices (replicas) of the job."""
    if threads.replicas() is not None:
        return replicas.ordinal(threads.current_index())
    runtime = client()
    return runtime.global_devices.index(runtime.device(threads.current_index()))


def local_ordinal() -> int:
    """Ordinal of the calling thread's device among the devices of this host."""
    return _local_rank() * addressable_device_count() + threads.current_index()


def _local_rank() -> int:
    where = distributed.topology()
    return 0 if where is None else where.local_rank


def local_process_count() -> int:
    """Processes on this host."""
    where = distributed.topology()
    return 1 if where is None else where.local_count


def addressable_device_count() -> int:
    """Devices this process drives (one, the virtual device, in SPMD mode)."""
    return client().device_count()


def local_device_count() -> int:
    """Devices of this host, over all its processes."""
    return local_process_count() * addressable_device_count()


def global_device_count() -> int:
    """Devices of the whole job (one, the virtual device, in SPMD mode)."""
    return client().global_device_count()


def host_index() -> int:
    return registry.active().plugin.host_index()


def process_index() -> int:
    return client().process_index()


def process_count() -> int:
    return client().process_count()


def initialize_cache(path: str, readonly: bool = False) -> None:
    """Keep compiled programs in `path` across runs; call before the first compilation."""
    running = started()
    if running is not None and running.compiled_once:
        raise XlaRuntimeError(
            "initialize_cache() must be called before the first compilation; this process "
            "has already compiled a graph. Call it at the start of the program."
        )
    compile_cache.configure(path, readonly)


def get_num_cached_compilation_graph() -> int:
    """Compiled graphs held by the in-memory program cache (not counting the persistent one)."""
    return torch_xla._XLAC._xla_get_num_cached_compilation_graph()


def clear_computation_cache() -> None:
    """Drop every compiled program this process keeps: the in-memory cache (so
    `get_num_cached_compilation_graph()` is 0 after it) and the entries of the persistent
    cache that `initialize_cache` set up (a read-only one is left as it is). The next
    sync of a graph compiles it again. A function compiled by `torch.compile` keeps the
    programs it holds until it is itself dropped (`torch._dynamo.reset()`)."""
    torch_xla._XLAC._xla_computation_cache_clear()


def global_runtime_device_count() -> int:
    """Runtime devices of the whole job: in SPMD mode the devices behind the virtual one."""
    return len(torch_xla._XLAC._xla_get_all_runtime_devices())


def addressable_runtime_device_count() -> int:
    """Runtime devices this process drives."""
    return torch_xla._XLAC._xla_num_runtime_devices()


def runtime_device_attributes(device: str | torch.device) -> dict[str, object]:
    """What the runtime reports about `device` (`xla:N`, or a runtime name such as `CPU:0`)."""
    return torch_xla._XLAC._xla_get_device_attributes(str(device))


def global_runtime_device_attributes() -> list[dict[str, object]]:
    """`runtime_device_attributes` of every device of the job, by global ordinal."""
    return torch_xla._XLAC._xla_get_all_device_attributes()


def is_bf16_supported() -> bool:
    """Whether the device can hold a bfloat16 tensor (tries one)."""
    try:
        torch.tensor([1.0], dtype=torch.bfloat16, device="xla").cpu()
    except Exception:  # any failure of the device or its plugin means "no"
        return False
    return True


def get_master_ip() -> str:
    """IP address of the job's master process (the host of its coordinator)."""
    where = distributed.topology()
    if where is None:
        raise XlaRuntimeError(
            f"get_master_ip(): this process ({device_type()}) is not part of a multi-process "
            "job, so there is no master worker. Start the job with xmp.spawn, "
            "torch_xla.launch or torchrun."
        )
    host = where.coordinator.rsplit(":", 1)[0]
    return socket.gethostbyname(host)


def use_spmd(auto: bool | None = False) -> None:
    """Run programs in SPMD mode: `xla:0` becomes one virtual device over every device of
    the job, and `xs.mark_sharding` decides how tensors are laid out over them. Call it
    at the start of the program; tensors created before are replicated on first use."""
    if auto:
        raise NotImplementedError(
            "use_spmd(auto=True): XLA's auto-sharding pass is not available through jax's "
            "compiler here; annotate tensors with xs.mark_sharding instead.")
    if os.environ.get(spmd.USE_SPMD_VARIABLE) is not None:
        warnings.warn("XLA_USE_SPMD is being deprecated. Use torch_xla.runtime.use_spmd() "
                      "without setting XLA_USE_SPMD env-var.", stacklevel=2)
    if started() is not None and not spmd.enabled() and replicas_live():
        warnings.warn("Replicating tensors already initialized on non-virtual XLA device for "
                      "SPMD to force SPMD mode. This is one-time overhead to setup; call "
                      "use_spmd() before creating tensors to avoid it.", stacklevel=2)
    os.environ[spmd.USE_SPMD_VARIABLE] = "1"
    spmd.enable()


def replicas_live() -> bool:
    """Whether XLA tensors exist (they were made on one device, before SPMD mode)."""
    return bool(tensor.live_tensors())


def is_spmd() -> bool:
    """Whether SPMD mode is asked for (XLA_USE_SPMD, which `use_spmd()` sets), as in
    PyTorch/XLA."""
    return spmd.requested()
