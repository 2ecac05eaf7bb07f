"""The `torch_xla._XLAC` entry points that user code, tools and PyTorch/XLA's tests call directly.

PyTorch/XLA's `_XLAC` is its C++ extension; here each entry point is a thin
function over the runtime client or the lazy engine, with the same name,
arguments and meaning. Device strings follow PyTorch/XLA: `xla:N` names a
device as torch sees it, `TYPE:K` (e.g. `CPU:0`) a runtime device, K being its
ordinal among all devices of the job.

Nothing is imported at module level beyond the metrics: `import torch_xla` must
not import jax.
"""

from __future__ import annotations

import re
from typing import Any

from torch_xla import _metrics

_DEFAULT_DEVICE = "xla:0"  # every process computes on its xla:0 unless told otherwise


# --- metrics --------------------------------------------------------------------


def _xla_metrics_report() -> str:
    return _metrics.report()


def _xla_increment_counter(name: str, value: int = 1) -> None:
    _metrics.counter(name).inc(value)


# --- runtime and devices --------------------------------------------------------------


def _xla_runtime_is_initialized() -> bool:
    """Whether this process's runtime client exists (the device type is then fixed)."""
    from torch_xla.pjrt.client import started

    return started() is not None


def _xla_get_default_device() -> str:
    return _DEFAULT_DEVICE


def _xla_get_default_device_ordinal() -> int:
    """Ordinal of the default device among all devices of the job."""
    return _global_ordinal(_local_index(_DEFAULT_DEVICE))


def _xla_get_device_ordinal(device: Any) -> int:
    """N of `xla:N`."""
    return _local_index(device)


def _xla_num_devices() -> int:
    """Devices this process drives."""
    from torch_xla.pjrt.client import client

    return len(client().devices)


def _xla_get_devices() -> list[str]:
    """Runtime names of the devices this process drives, `xla:0` first."""
    from torch_xla.pjrt.client import client

    return [_runtime_name(d) for d in client().devices]


def _xla_get_all_devices() -> list[str]:
    """Runtime names of every device of the job, by global ordinal."""
    from torch_xla.pjrt.client import client

    runtime = client()
    return [f"{runtime.name}:{k}" for k in range(len(runtime.global_devices))]


def _xla_real_devices(devices: list[Any] | None = None) -> list[str]:
    """Runtime names of `devices` (`xla:N`; default: every device of this process)."""
    if devices is None:
        return _xla_get_devices()
    return [_runtime_name(_jax_device(d)) for d in devices]


def _xla_get_process_index() -> int:
    from torch_xla.pjrt.client import client

    return client().process_index()


def _xla_get_num_processes() -> int:
    from torch_xla.pjrt.client import client

    return client().process_count()


def _xla_get_device_attributes(device: Any) -> dict[str, object]:
    """What the runtime says about one device (`xla:N` or `TYPE:K`)."""
    return _attributes(_jax_device(device))


def _xla_get_all_device_attributes() -> list[dict[str, object]]:
    from torch_xla.pjrt.client import client

    return [_attributes(d) for d in client().global_devices]


def _xla_memory_info(device: Any) -> dict[str, int]:
    """`bytes_used`, `bytes_limit` and `peak_bytes_used` of a device, from the runtime."""
    found = _jax_device(device)
    stats = found.memory_stats()
    if not stats or "bytes_in_use" not in stats:
        raise RuntimeError(
            f"The runtime reports no memory statistics for {device} ({_runtime_name(found)}, "
            f"a {found.device_kind} device); memory information needs a device whose "
            "PJRT plugin reports it."
        )
    return {
        "bytes_used": int(stats["bytes_in_use"]),
        "bytes_limit": int(stats.get("bytes_limit", 0)),
        "peak_bytes_used": int(stats.get("peak_bytes_in_use", stats["bytes_in_use"])),
    }


def _local_index(device: Any) -> int:
    """N of an `xla:N` device given as a string or `torch.device`."""
    text = str(device)
    match = re.fullmatch(r"xla(?::(\d+))?", text)
    if match is None:
        raise RuntimeError(f"Invalid device {text!r}: expected an XLA device such as 'xla:0'.")
    return int(match.group(1) or 0)


def _jax_device(device: Any) -> Any:
    from torch_xla.pjrt.client import client

    runtime = client()
    match = re.fullmatch(r"([A-Z_]+):(\d+)", str(device))
    if match is None:
        return runtime.device(_local_index(device))
    if match.group(1) != runtime.name or int(match.group(2)) >= len(runtime.global_devices):
        raise RuntimeError(
            f"Unknown device {device!r}: this job's devices are {_xla_get_all_devices()}."
        )
    return runtime.global_devices[int(match.group(2))]


def _global_ordinal(index: int) -> int:
    from torch_xla.pjrt.client import client

    runtime = client()
    return runtime.global_devices.index(runtime.device(index))


def _runtime_name(jax_device: Any) -> str:
    from torch_xla.pjrt.client import client

    runtime = client()
    return f"{runtime.name}:{runtime.global_devices.index(jax_device)}"


# Attributes a PJRT device may expose through jax, besides the ones every device has.
_OPTIONAL_ATTRIBUTES = ("coords", "core_on_chip", "slice_index", "num_cores")


def _attributes(jax_device: Any) -> dict[str, object]:
    found: dict[str, object] = {
        "name": _runtime_name(jax_device),
        "device_kind": jax_device.device_kind,
        "process_index": jax_device.process_index,
    }
    for name in _OPTIONAL_ATTRIBUTES:
        value = getattr(jax_device, name, None)
        if value is not None:
            found[name] = value
    return found


# --- random numbers ---------------------------------------------------------------------


def _xla_get_rng_seed(device: str = "") -> int:
    """The RNG state; one per process, shared by every device."""
    from torch_xla.lazy import rng

    return rng.get_state()


def _xla_set_rng_seed(seed: int, device: str = "") -> None:
    from torch_xla.lazy import rng

    rng.set_state(seed)


# --- running pending work -----------------------------------------------------------------


def _xla_step_marker(device: str = _DEFAULT_DEVICE, devices: list | None = None,
                     wait: bool = True, reset_scope: bool = True) -> None:
    """Run every pending computation (`xm.mark_step` without its step closures)."""
    from torch_xla.lazy import graph

    graph.mark_step()
    if wait:
        graph.wait_device_ops()


def _xla_sync_multi(tensors, devices=None, wait: bool = True, sync_xla_data: bool = True) -> None:
    from torch_xla.lazy import functional, graph

    graph.sync([functional.unwrap(t) for t in tensors])
    if wait:
        graph.wait_device_ops()


def _xla_wait_device_ops(devices: list | None = None) -> None:
    from torch_xla.lazy import graph

    graph.wait_device_ops()


def _xla_get_num_cached_compilation_graph() -> int:
    """Compiled graphs held by the in-memory program cache."""
    from torch_xla.lazy import compiler

    return len(compiler.cache())


# --- inspecting pending graphs ---------------------------------------------------------------


def _pending_graph(tensors: list) -> tuple[list, dict, list, list]:
    """(post-order nodes, position of each node, data leaves, root values) of `tensors`."""
    from torch_xla.lazy import functional, graph

    values = [functional.unwrap(t).value for t in tensors]
    order, position, leaves, _ = graph.walk(values)
    return order, position, leaves, values


def _get_xla_tensors_text(tensors: list) -> str:
    """The IR graph that computes `tensors`, one node a line in PyTorch/XLA's layout:
    `%k = <storage type>[shape] <op>(<operands>)`, roots marked `ROOT=i`."""
    order, position, _, values = _pending_graph(tensors)
    roots: dict[tuple[int, int], int] = {}
    for i, (node, out) in enumerate(values):
        roots.setdefault((position[id(node)], out), i)
    lines = [_ir_line(k, node, position, roots) for k, node in enumerate(order)]
    return "IR {\n" + "".join(lines) + "}\n"


def _ir_line(k: int, node: Any, position: dict, roots: dict) -> str:
    types = ", ".join(_xla_type(a) for a in node.avals)
    if len(node.avals) > 1:
        types = f"({types})"
    operands = ", ".join(f"%{position[id(n)]}" + (f".{i}" if len(n.avals) > 1 else "")
                         for n, i in node.inputs)
    marks = [f"ROOT={roots[(k, i)]}" for i in range(len(node.avals)) if (k, i) in roots]
    extra = "".join(f", {m}" for m in marks)
    if node.location:
        extra += f", location={node.location}"
    return f"  %{k} = {types} {_op_name(node.op)}({operands}){extra}\n"


def _op_name(op: Any) -> str:
    schema = getattr(op, "_schema", None)
    return schema.name if schema is not None else str(op)  # aten::add, xla::device_data


_XLA_PREFIXES = (("bfloat", "bf"), ("float", "f"), ("uint", "u"), ("int", "s"),
                 ("complex", "c"))


def _xla_type(aval: Any) -> str:
    """`bf16[2,3]`: the element type the device stores (XLA's short name) and the shape."""
    if aval is None:
        return "()"
    from torch_xla.lazy import dtype_policy

    shape, dtype = aval
    name = str(dtype_policy.STORAGE[dtype])
    short = "pred" if name == "bool" else next(
        (short + name[len(long):] for long, short in _XLA_PREFIXES if name.startswith(long)),
        name)
    return f"{short}[{','.join(map(str, shape))}]"


def _lowered(tensors: list) -> Any:
    import jax

    from torch_xla.lazy import compiler

    order, position, leaves, values = _pending_graph(tensors)
    fn = compiler.graph_function(order, position, leaves, values)
    return jax.jit(fn).lower(*[leaf.array for leaf in leaves])


def _get_xla_tensors_hlo(tensors: list) -> str:
    """The HLO module (before XLA's optimizations) that computes `tensors`; nothing runs."""
    return _lowered(tensors).as_text(dialect="hlo")


def _get_stablehlo(tensors: list, device: str = _DEFAULT_DEVICE, devices: list | None = None,
                   emit_bytecode: bool = False) -> bytes:
    """The StableHLO module that computes `tensors`, as text (or MLIR bytecode)."""
    if not tensors:
        from torch_xla.lazy.tensor import pending_tensors

        tensors = pending_tensors()  # engine tensors: `functional.unwrap` takes them as they are
    lowered = _lowered(tensors)
    if emit_bytecode:
        from jax._src.interpreters import mlir

        return mlir.module_to_bytecode(lowered.compiler_ir("stablehlo"))
    return lowered.as_text().encode()
