"""`torch_xla.runtime` (imported as `xr`): which device this process runs on, and its topology.

Names and meaning follow PyTorch/XLA. "Addressable" devices are the ones this
process drives; "local" ones are all devices of this host (every process on
it); "global" ones are all devices of the job.
"""

from __future__ import annotations

from torch_xla.pjrt import cache as compile_cache
from torch_xla.pjrt import distributed
from torch_xla.pjrt.client import XlaRuntimeError, client, started
from torch_xla.plugins import registry


def device_type() -> str:
    """The active device type (upper-case plugin name), chosen but not yet started."""
    return registry.active().name


def set_device_type(pjrt_device: str) -> None:
    """Choose the device type; only possible before the runtime has started."""
    running = started()
    if running is not None and running.name != registry.canonical_name(pjrt_device):
        raise XlaRuntimeError(
            f"Cannot switch to device type {pjrt_device!r}: the runtime already started "
            f"with {running.name!r}. Set PJRT_DEVICE before the first use of a device, "
            "or call set_device_type() earlier."
        )
    registry.set_active(pjrt_device)


def using_pjrt() -> bool:
    return True


def _in_multiprocess_world() -> bool:
    return distributed.topology() is not None or process_count() > 1


def world_size() -> int:
    """Number of replicas: every device of the job under xmp.spawn, else 1."""
    return global_device_count() if _in_multiprocess_world() else 1


def global_ordinal() -> int:
    """Ordinal of this process's default device among all devices of the job."""
    runtime = client()
    return runtime.global_devices.index(runtime.devices[0])


def local_ordinal() -> int:
    """Ordinal of this process's default device among the devices of this host."""
    return _local_rank() * addressable_device_count()


def _local_rank() -> int:
    where = distributed.topology()
    return 0 if where is None else where.local_rank


def local_process_count() -> int:
    """Processes on this host."""
    where = distributed.topology()
    return 1 if where is None else where.local_count


def addressable_device_count() -> int:
    """Devices this process drives."""
    return len(client().devices)


def local_device_count() -> int:
    """Devices of this host, over all its processes."""
    return local_process_count() * addressable_device_count()


def global_device_count() -> int:
    """Devices of the whole job."""
    return len(client().global_devices)


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
