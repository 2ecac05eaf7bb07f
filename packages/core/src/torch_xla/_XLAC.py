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
import types
from typing import Any

from torch_xla import _metrics

_DEFAULT_DEVICE = "xla:0"  # every process computes on its xla:0 unless told otherwise
_DONATION_SET = _metrics.counter("XlaSetBufferDonation")


# --- metrics --------------------------------------------------------------------


def _xla_metrics_report() -> str:
    return _metrics.report()


def _xla_increment_counter(name: str, value: int = 1) -> None:
    _metrics.counter(name).inc(value)


def _get_executed_fallback_ops() -> list[str]:
    """The ops that ran on the CPU since the counters were last cleared."""
    return _metrics.fallback_ops()


# --- eager mode -----------------------------------------------------------------------


def _set_use_eager_mode(enable: bool) -> None:
    """Run every op as soon as it is recorded (True) or lazily until a sync (False)."""
    from torch_xla.lazy import eager

    eager.set_enabled(bool(enable))


def _get_use_eager_mode() -> bool:
    from torch_xla.lazy import eager

    return eager.enabled()


# --- lowering settings -----------------------------------------------------------------


def _xla_set_mat_mul_precision(precision: str) -> None:
    """The precision of 32-bit matmuls and convolutions in graphs lowered from now on
    (`torch_xla.backends.set_mat_mul_precision`, without its warning)."""
    from torch_xla.lowering import policy

    policy.set_matmul_precision(precision)


def _xla_set_use_full_mat_mul_precision(use_full_mat_mul_precision: bool = True) -> None:
    """PyTorch/XLA's older switch: full float32 matmuls ("highest") or the default."""
    _xla_set_mat_mul_precision("highest" if use_full_mat_mul_precision else "default")


# --- runtime and devices --------------------------------------------------------------


def _xla_runtime_is_initialized() -> bool:
    """Whether this process's runtime client exists (the device type is then fixed)."""
    from torch_xla.pjrt.client import started

    return started() is not None


def _xla_get_default_device() -> str:
    """The calling thread's device (`xla:0` unless it chose another)."""
    from torch_xla.pjrt import threads

    return f"xla:{threads.current_index()}"


def _xla_set_default_device(device: Any) -> None:
    """Make `device` (`xla:N`) the calling thread's device, as PyTorch/XLA's threads do."""
    from torch_xla.pjrt import threads

    threads.set_current(_local_index(device))


def _xla_get_default_device_ordinal() -> int:
    """Ordinal of the calling thread's device among all devices of the job."""
    return _global_ordinal(_local_index(_xla_get_default_device()))


def _xla_get_device_ordinal(device: Any) -> int:
    """N of `xla:N`."""
    return _local_index(device)


def _xla_num_devices() -> int:
    """Devices this process drives."""
    from torch_xla.pjrt.client import client

    return client().device_count()


def _xla_get_devices() -> list[str]:
    """Runtime names of the devices this process drives, `xla:0` first (SPMD: `xla:0`'s)."""
    from torch_xla.pjrt.client import client

    runtime = client()
    return [_runtime_name(d) for d in runtime.devices[:runtime.device_count()]]


def _xla_get_all_devices() -> list[str]:
    """Runtime names of every device of the job, by global ordinal (SPMD: the virtual one)."""
    from torch_xla.pjrt.client import client

    runtime = client()
    return [f"{runtime.name}:{k}" for k in range(runtime.global_device_count())]


def _xla_num_runtime_devices() -> int:
    """Runtime devices this process drives (in SPMD mode too)."""
    from torch_xla.pjrt.client import client

    return len(client().devices)


def _xla_get_runtime_devices() -> list[str]:
    """Runtime names of the devices this process drives (in SPMD mode too)."""
    from torch_xla.pjrt.client import client

    return [_runtime_name(d) for d in client().devices]


def _xla_get_all_runtime_devices() -> list[str]:
    """Runtime names of every device of the job (in SPMD mode too)."""
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
    if match.group(1) is None:  # `xla`: the calling thread's device
        from torch_xla.pjrt import threads

        return threads.current_index()
    return int(match.group(1))


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


# --- SPMD sharding (torch_xla.distributed.spmd is built on the same engine functions) -----


def _sharded_engine_tensor(tensor: Any) -> Any:
    """The engine tensor of an XLA tensor or of an `XLAShardedTensor` around one (with the
    sharding the user marked it with, after in-place updates too)."""
    from torch_xla.lazy import functional, sharding

    tensor = getattr(tensor, "global_tensor", tensor)
    sharding.keep_annotations(tensor)
    return functional.unwrap(tensor)


def _get_xla_sharding_spec(tensor: Any) -> str:
    """PyTorch/XLA's sharding text of an XLA tensor (`''` when nothing laid it out)."""
    from torch_xla.lazy import sharding

    return sharding.spec(_sharded_engine_tensor(tensor))


def _get_xla_sharding_type(tensor: Any) -> int | None:
    """The tensor's `ShardingType` as an int, or None when it has no sharding."""
    from torch_xla.distributed.spmd import xla_sharded_tensor

    found = xla_sharded_tensor.sharding_type(tensor)
    return None if found is None else int(found)


def _xla_get_auto_sharding() -> bool:
    """Whether XLA's auto-sharding pass shards the programs: never here, since
    `xr.use_spmd(auto=True)` refuses (jax's compiler offers no auto-sharding)."""
    return False


def _xla_mark_sharding(tensor: Any, sharding: Any) -> None:
    """Lay `tensor` out as `sharding` (what `Mesh.get_op_sharding(spec)` returns)."""
    from torch_xla.lazy import sharding as layouts

    layouts.mark(getattr(tensor, "global_tensor", tensor), sharding)


def _xla_annotate_custom_sharding(tensor: Any, sharding: Any) -> None:
    """A constraint laying out `tensor`'s value as `sharding` inside the next program,
    its data left where it is (`xs.annotate_custom_sharding`)."""
    from torch_xla.lazy import sharding as layouts

    layouts.mark_custom(getattr(tensor, "global_tensor", tensor), sharding)


def _xla_clear_sharding(tensor: Any) -> None:
    from torch_xla.lazy import sharding

    tensor = getattr(tensor, "global_tensor", tensor)
    sharding.forget(tensor)
    sharding.clear(_sharded_engine_tensor(tensor))


def OpSharding(tile_assignment: list, group_assignment: list, replication_groups: list,
               sharding_type: int) -> Any:
    """The sharding PyTorch/XLA's `xla::OpSharding` constructor names, as what
    `Mesh.get_op_sharding` returns here (`{manual}` for ShardingType.MANUAL)."""
    from torch_xla.distributed.spmd import xla_sharding

    return xla_sharding.op_sharding(tile_assignment, group_assignment, replication_groups,
                                    sharding_type)


def _mark_manual_sharding(tensor: Any, sharding: Any = None) -> None:
    """Annotate a computed (not device data) tensor as a value of a manual region."""
    from torch_xla.distributed.spmd import xla_sharding

    xla_sharding.check_manual(sharding, "_mark_manual_sharding")
    xla_sharding.mark_manual(tensor)


def _spmd_full_to_shard_shape(tensor: Any) -> Any:
    """Each device's shard of the sharded `tensor`, a new tensor sharded `{manual}`."""
    from torch_xla.lazy import functional, manual

    return functional.wrap(manual.full_to_shard(_sharded_engine_tensor(tensor)))


def _spmd_shard_to_full_shape(tensor: Any, sharding: Any, output_shape: Any,
                              output_dtype: Any) -> Any:
    """The global tensor of `output_shape` laid out as `sharding` from the manual `tensor`
    (one shard per device)."""
    from torch_xla.lazy import functional, manual

    return functional.wrap(manual.shard_to_full(_sharded_engine_tensor(tensor), sharding,
                                                tuple(output_shape), output_dtype))


def _xla_spmd_all_reduce(reduce_type: str, input: Any, scale: float, groups: list) -> Any:
    """Inside a manual region: each device's shard reduced over its group of devices
    (global device ids; every device in one group), times `scale`."""
    from torch_xla.lazy import functional, manual

    return functional.wrap(manual.all_reduce(_sharded_engine_tensor(input), reduce_type,
                                             scale, groups))


def _xla_spmd_reduce_scatter(reduce_type: str, input: Any, scale: float, scatter_dim: int,
                             shard_count: int, groups: list) -> Any:
    """Inside a manual region: each device's shard reduced over its group of
    `shard_count` devices, the device at position i of its group keeping piece i of
    `scatter_dim`, times `scale`."""
    from torch_xla.lazy import functional, manual

    return functional.wrap(manual.reduce_scatter(_sharded_engine_tensor(input), reduce_type,
                                                 scale, scatter_dim, shard_count, groups))


def _xla_custom_call(args: list, call_target: str, output_shapes: list, output_dtypes: list,
                     has_side_effect: bool = False, backend_config: str = "",
                     api_version: int = 0, frontend_attributes: dict | None = None) -> list:
    """The outputs of XLA custom call `call_target` on the XLA tensors `args`: one new
    tensor per output shape and dtype (`lazy/custom_call.py`)."""
    from torch_xla.lazy import custom_call

    return custom_call.record(args, call_target, output_shapes, output_dtypes,
                              has_side_effect, backend_config, api_version,
                              frontend_attributes)


def _get_local_shards(tensors: list) -> list[list[tuple[Any, str]]]:
    """Per tensor, (host copy, runtime device) of each tile on this process's devices."""
    from torch_xla.distributed.spmd import xla_sharded_tensor

    return [[(data, device) for data, _, device, _ in xla_sharded_tensor.local_shards(t)]
            for t in tensors]


def _get_local_shard_replica_and_indices(tensors: list) -> list[list[tuple[int, Any]]]:
    """Per tensor, (replica id, indices) of each tile on this process's devices."""
    from torch_xla.distributed.spmd import xla_sharded_tensor

    return [[(replica, indices) for _, indices, _, replica in
             xla_sharded_tensor.local_shards(t)] for t in tensors]


def _load_local_shards(tensor: Any, shards: list, devices: list[str]) -> None:
    from torch_xla.distributed.spmd import xla_sharded_tensor

    xla_sharded_tensor.load_local_shards(tensor, shards, devices)


def _global_tensor_from_cpu_shards(shards: list, sharding: Any, global_shape: Any = None) -> Any:
    """An XLA tensor laid out as `sharding` from one CPU tile per device of this process
    (in device order); `global_shape` defaults to the tiles put together."""
    from torch_xla.lazy import functional, transfer
    from torch_xla.lazy import sharding as layouts
    from torch_xla.lazy.tensor import XLATensor

    if not shards:
        raise RuntimeError("_global_tensor_from_cpu_shards: no shards given.")
    tiles = [transfer.to_numpy(s.contiguous()) for s in shards]
    if global_shape is None:
        global_shape = _whole_shape(sharding, tuple(tiles[0].shape))
    shape = tuple(int(d) for d in global_shape)
    dtype = shards[0].dtype
    tiles = [t.astype(tiles[0].dtype) for t in tiles]
    data = layouts.from_shards(tiles, dtype, sharding, shape, 0)
    return functional.wrap(XLATensor(data))


def _whole_shape(sharding: Any, tile: tuple) -> tuple:
    """The global shape whose even tiles under `sharding` are `tile`."""
    hlo = sharding._to_xla_hlo_sharding(len(tile))
    if hlo.is_replicated():
        return tile
    dims = list(hlo.tile_assignment_dimensions())[:len(tile)]
    return tuple(n * d for n, d in zip(tile, dims, strict=True))


# --- copies from the host ----------------------------------------------------------------


def _xla_tensors_from_aten(tensors: list, devices: list, shardings: list | None = None) -> list:
    """Copies of the CPU `tensors` on `devices` (one device name each), as device data;
    with `shardings` (SPMD), each copy laid out as its sharding says."""
    import torch

    if len(devices) != len(tensors):
        raise ValueError(f"_xla_tensors_from_aten: {len(tensors)} tensors but {len(devices)} "
                         "devices; give one device per tensor.")
    if shardings is not None and len(shardings) != len(tensors):
        raise ValueError(f"_xla_tensors_from_aten: {len(tensors)} tensors but "
                         f"{len(shardings)} shardings; give one (or None) per tensor.")
    out = []
    for k, (t, device) in enumerate(zip(tensors, devices, strict=True)):
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            raise TypeError(f"_xla_tensors_from_aten: tensor {k} is not a CPU tensor "
                            f"({type(t).__name__} on {getattr(t, 'device', None)}).")
        moved = t.to(device)
        if shardings is not None and shardings[k] is not None:
            _xla_mark_sharding(moved, shardings[k])
        out.append(moved)
    return out


# --- a tensor's value ---------------------------------------------------------------------


def _replace_xla_tensor(dest: Any, source: Any) -> Any:
    """Make `dest` hold `source`'s value, shape included, outside autograd; returns `dest`.

    PyTorch/XLA's FSDP frees a gathered parameter with `_replace_xla_tensor(p,
    p.new_zeros(1))` and refills it before the backward, keeping `p` the tensor autograd
    saved. So `dest` keeps its version counter (the saved graph still accepts it); like
    `set_`, it then shares `source`'s storage. Both must be XLA tensors of one dtype."""
    import torch

    for name, t in (("dest", dest), ("source", source)):
        if not isinstance(t, torch.Tensor) or t.device.type != "xla":
            raise TypeError(f"_replace_xla_tensor: {name} must be an XLA tensor, got "
                            f"{type(t).__name__} on {getattr(t, 'device', None)}.")
    if dest.dtype != source.dtype:
        raise TypeError(f"_replace_xla_tensor: dest is {dest.dtype} but source is "
                        f"{source.dtype}; convert source first (`source.to(dest.dtype)`).")
    version = dest._version
    with torch.no_grad():
        dest.set_(source)
    torch._C._autograd._unsafe_set_version_counter((dest,), (version,))
    return dest


def _get_xla_tensor_dimension_size(tensor: Any, dim: int) -> Any:
    """The size of dimension `dim` of `tensor`, as an int32 scalar on its device.

    In PyTorch/XLA this reads the runtime size of a bounded dynamic dimension. Shapes here
    are always exact (an op whose output shape depends on the data, such as `nonzero`,
    runs where the data is), so this is the tensor's own size."""
    import torch

    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "xla":
        raise TypeError("_get_xla_tensor_dimension_size: expected an XLA tensor, got "
                        f"{type(tensor).__name__} on {getattr(tensor, 'device', None)}.")
    return torch.tensor(tensor.size(dim), dtype=torch.int32, device=tensor.device)


# --- random numbers ---------------------------------------------------------------------


def _xla_get_rng_seed(device: str = "") -> int:
    """The RNG state; one per process, shared by every device."""
    from torch_xla.lazy import rng

    return rng.get_state()


def _xla_set_rng_seed(seed: int, device: str = "") -> None:
    from torch_xla.lazy import rng

    rng.set_state(seed)


def _get_seed_info_id() -> int:
    """The id `_get_tensors_xla_device_data_node` gives the RNG seed among a graph's
    inputs: a caller replaying the graph passes `_get_base_seed_as_tensor`'s tensor there."""
    from torch_xla.lazy import rng

    return rng.SEED_INFO_ID


def _get_base_seed_as_tensor(device: str = _DEFAULT_DEVICE) -> Any:
    """The seed the random ops recorded on `device` until the next sync derive their keys
    from (a uint32[2] raw key; a sync starts a new one), as an XLA tensor."""
    from torch_xla.lazy import functional, rng
    from torch_xla.lazy.tensor import XLATensor

    return functional.wrap(XLATensor(rng.epoch_seed(_local_index(device))))


# --- running pending work -----------------------------------------------------------------


def _xla_step_marker(device: str = _DEFAULT_DEVICE, devices: list | None = None,
                     wait: bool = True, reset_scope: bool = True) -> None:
    """Run every pending computation (`xm.mark_step` without its step closures)."""
    from torch_xla.lazy import graph, ir

    if reset_scope:
        ir.require_no_open_scope()
    graph.mark_step()
    if wait:
        graph.wait_device_ops()


def _xla_sync_multi(tensors, devices=None, wait: bool = True, sync_xla_data: bool = True) -> None:
    """Compute `tensors` in one graph per device. `sync_xla_data=False`: the graph takes
    over no buffer of the tensors it overwrites (only user-marked donors, and only under
    `_xla_set_enable_alias_with_buffer_donor_config(True)`)."""
    from torch_xla.lazy import functional, graph

    graph.sync([functional.unwrap(t) for t in tensors], step=sync_xla_data)
    if wait:
        graph.wait_device_ops()


# --- buffer donation the user asks for -------------------------------------------------------


def _set_buffer_donation(tensor: Any, should_donate: bool) -> bool:
    """Mark (or unmark) the device buffer of `tensor` as one the next program reading it
    may take over for an output (then the tensor's value is gone). False when `tensor` has
    no device buffer yet (its value is pending): nothing is marked."""
    from torch_xla.lazy import functional, graph

    node = functional.unwrap(tensor)._node
    if node.rule is not None:
        return False
    graph.mark_donor(node, should_donate)
    _DONATION_SET.value += 1
    return True


def _get_buffer_donation(tensor: Any) -> bool:
    """Whether the device buffer of `tensor` is marked as a donor."""
    from torch_xla.lazy import functional

    node = functional.unwrap(tensor)._node
    return node.rule is None and node.donor


def _is_placecholder(tensor: Any) -> bool:
    """Whether `tensor` is device data without a buffer (donated to a program, or its
    pending value dropped by `_clear_pending_irs`); the name is PyTorch/XLA's,
    misspelling included."""
    from torch_xla.lazy import functional, ir

    node = functional.unwrap(tensor)._node
    return node.rule is None and (isinstance(node, ir.NoBuffer) or node.array.is_deleted())


_is_placeholder = _is_placecholder  # PyTorch/XLA's later, corrected spelling


def _clear_pending_irs(device: str = _DEFAULT_DEVICE) -> None:
    """Drop the pending computations of every live tensor on `device` without running
    them: those tensors keep their shape and dtype but have no value (reading one raises
    `DroppedValueError`), and the next sync has nothing of theirs to compute."""
    from torch_xla.lazy import graph

    graph.drop_pending(_local_index(device))


def _xla_set_enable_alias_with_buffer_donor_config(enabled: bool) -> None:
    """Let syncs that are not a step's (`_xla_sync_multi(..., sync_xla_data=False)`) give
    programs the buffers marked with `_set_buffer_donation` too."""
    from torch_xla.lazy import graph

    graph.set_donor_config(enabled)


def _xla_get_enable_alias_with_buffer_donor_config() -> bool:
    from torch_xla.lazy import graph

    return graph.donor_config()


def _xla_wait_device_ops(devices: list | None = None) -> None:
    from torch_xla.lazy import graph

    graph.wait_device_ops()


def _xla_get_num_cached_compilation_graph() -> int:
    """Compiled graphs held by the in-memory program cache."""
    from torch_xla.lazy import compiler

    return len(compiler.cache())


def _xla_user_computation(opname: str, inputs: list, computation: Any) -> list:
    """`computation` (`xb.create_computation`'s) on XLA tensors `inputs`, recorded as one
    node of the graph: `xb.user_computation` under PyTorch/XLA's C++ name."""
    from torch_xla.core import xla_builder

    return xla_builder.user_computation(opname, inputs, computation)


def _xla_dot_general(lhs: Any, rhs: Any, dimension_numbers: Any,
                     precision_config: str | None = None,
                     preferred_element_type: Any = None) -> Any:
    """XLA's DotGeneral of two XLA tensors, recorded as one node of the graph.

    `dimension_numbers` is `((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`,
    the batch pair may be `()`; `precision_config` is None or jax's precision name
    ('default', 'high', 'highest'); `preferred_element_type` the result's torch dtype."""
    from torch_xla.lazy import jax_call
    from torch_xla.lowering import dtypes, xla_ops

    precision = None if precision_config is None else str(precision_config).upper()
    if precision not in (None, "DEFAULT", "HIGH", "HIGHEST"):
        raise ValueError(f"_xla_dot_general: precision_config {precision_config!r} is not one "
                         "of 'default', 'high', 'highest'")
    options = {
        "dimension_numbers": xla_ops.dot_dimension_numbers(dimension_numbers),
        "precision_config": precision,
        "preferred_element_type": (None if preferred_element_type is None
                                   else dtypes.to_jax(preferred_element_type)),
    }
    return jax_call.call(xla_ops.dot_general, (lhs, rhs), options, name="dot_general")


def _xla_computation_cache_clear() -> None:
    """Drop the compiled programs of the in-memory cache and the persistent cache's entries."""
    from torch_xla.lazy import compiler
    from torch_xla.pjrt import cache

    compiler.cache().clear()
    cache.clear()


# --- inspecting pending graphs ---------------------------------------------------------------


def _pending_graph(tensors: list) -> tuple[list, dict, list, list]:
    """(post-order nodes, position of each node, data leaves, root values) of `tensors`."""
    from torch_xla.lazy import functional, graph, sharding

    for t in tensors:
        sharding.keep_annotations(t)
    values = [functional.unwrap(t).value for t in tensors]
    order, position, leaves, _ = graph.walk(values)
    return order, position, leaves, values


# --- cached graphs (what PyTorch/XLA's dynamo bridge is written against) -------------------


def _init_computation_client() -> None:
    """Start this process's runtime client (it starts on first use anyway)."""
    from torch_xla.pjrt.client import client

    client()


def _set_allow_execution(allow: bool) -> None:
    """Allow (True, the default) or forbid graph execution: while forbidden, a graph about
    to run raises RuntimeError ("Unexpected execution happens inside the compiled
    function"), e.g. to prove a traced region reads no value on the host."""
    from torch_xla.lazy import graph

    graph.set_allow_execution(allow)


# --- the dynamic shape detector (torch_xla.compile's num_different_graphs_allowed) -----


def _dynamic_shape_detector_set_max_num_different_graphs_allowed(count: int) -> None:
    """How many different graphs a session started from now on may trace."""
    from torch_xla.lazy import dynamic_shape_detector

    dynamic_shape_detector.set_limit(count)


# its name in PyTorch/XLA 2.6
_dynamic_shape_detector_set_max_different_graphs = (
    _dynamic_shape_detector_set_max_num_different_graphs_allowed)


def _dynamic_shape_detector_start_session(name: str) -> None:
    """Start tracing one call of session `name`: its recorded nodes are one graph."""
    from torch_xla.lazy import dynamic_shape_detector

    dynamic_shape_detector.start(name)


def _dynamic_shape_detector_end_session() -> None:
    """End the call started last; RuntimeError when its graph is one too many."""
    from torch_xla.lazy import dynamic_shape_detector

    dynamic_shape_detector.end()


def _dynamic_shape_detector_remove_session(name: str) -> None:
    """Forget the graphs of session `name`."""
    from torch_xla.lazy import dynamic_shape_detector

    dynamic_shape_detector.remove(name)


_LAZY_BACKEND = {"registered": False}


def _init_xla_lazy_backend() -> None:
    """Load the lazy engine that records the `xla` device's ops (PyTorch/XLA registers its
    C++ lazy backend here, counting `RegisterXLAFunctions` once). The engine loads on first
    use anyway; calling this again does nothing."""
    import torch_xla.lazy  # noqa: F401  (loading it installs the engine's op handler)

    if not _LAZY_BACKEND["registered"]:
        _LAZY_BACKEND["registered"] = True
        _metrics.counter("RegisterXLAFunctions").inc()


def _get_git_revs() -> dict[str, str]:
    """The source revisions this build runs: `xla` (torch-xla-core's version, with its git
    commit when it runs from a checkout), `torch` (torch's commit) and `jaxlib` (the XLA
    compiler's build, jaxlib's commit)."""
    import jaxlib.version
    import torch

    from torch_xla import version

    commit = version.git_revision()
    return {"xla": version.__version__ + (f"+git{commit}" if commit else ""),
            "torch": torch.version.git_version,
            "jaxlib": getattr(jaxlib.version, "_git_hash", None) or jaxlib.version.__version__}


def _xla_get_tensor_id(tensor: Any) -> int:
    from torch_xla._dynamo import dynamo_bridge

    return dynamo_bridge.tensor_id(tensor)


def _get_graph_hash(tensors: list) -> str:
    from torch_xla._dynamo import dynamo_bridge

    return dynamo_bridge.graph_hash(tensors)


def _get_tensors_xla_device_data_node(tensors: list) -> tuple[list[int], list]:
    from torch_xla._dynamo import dynamo_bridge

    return dynamo_bridge.device_data_inputs(tensors)


def _xla_warm_up_cache(tensors: list, devices: list) -> None:
    from torch_xla._dynamo import dynamo_bridge

    dynamo_bridge.warm_up_cache(tensors)


def _run_cached_graph(graph_hash: str, inputs: list) -> list:
    from torch_xla._dynamo import dynamo_bridge

    return dynamo_bridge.run_cached_graph(graph_hash, inputs)


def _get_xla_tensors_text(tensors: list) -> str:
    """The IR graph that computes `tensors`, one node a line in PyTorch/XLA's layout:
    `%k = <storage type>[shape]{layout} <op>(<operands>)`, roots marked `ROOT=i`."""
    from torch_xla.lazy import dump

    order, position, _, values = _pending_graph(tensors)
    return dump.ir_text(order, position, values)


def _check_tensor_need_materialization(tensors: list) -> list[bool]:
    """For each tensor, whether its value is still pending (a sync would compute it);
    False for device data and for tensors that are not XLA tensors."""
    import torch

    from torch_xla.lazy import functional

    return [isinstance(t, torch.Tensor) and t.device.type == "xla"
            and functional.unwrap(t)._node.rule is not None for t in tensors]


def _on_ready_callback(tensor: Any, callback: Any) -> None:
    """Call `callback()`, on another thread, once the device buffer of `tensor` holds its
    value (`torch_xla.experimental.callback.on_ready_callback`)."""
    from torch_xla.lazy import functional, graph
    from torch_xla.pjrt.client import client

    node = functional.unwrap(tensor)._node
    if node.rule is not None:
        raise RuntimeError("_on_ready_callback: the tensor's value is still pending, so it "
                           "has no device buffer yet; sync it first (torch_xla.sync()).")
    graph.check_not_donated([node])
    client().on_ready(node.array, callback)


def _get_xla_tensor_shape_type(tensor: Any) -> str:
    """The element type the device stores `tensor` in, as XLA names it (`f16`, `bf16`
    under XLA_USE_BF16, `pred` for bool)."""
    from torch_xla.lazy import dump, functional

    t = functional.unwrap(tensor)
    return dump.xla_type(((), t.dtype)).removesuffix("[]")


def _unsafe_buffer_pointer(tensor: Any) -> int:
    """The address of the device buffer holding `tensor` (equal for tensors that share
    one, as a DLPack round trip makes them)."""
    from torch_xla.lazy import functional, graph

    node = functional.unwrap(tensor)._node
    if node.rule is not None:
        raise RuntimeError("_unsafe_buffer_pointer: the tensor's value is still pending, so "
                           "it has no device buffer yet; sync it first (torch_xla.sync()).")
    graph.check_not_donated([node])
    return node.array.addressable_data(0).unsafe_buffer_pointer()


def _to_dlpack(tensor: Any) -> Any:
    """`torch_xla.utils.dlpack.to_dlpack`."""
    from torch_xla.utils import dlpack

    return dlpack.to_dlpack(tensor)


def _from_dlpack(external: Any) -> Any:
    """`torch_xla.utils.dlpack.from_dlpack`."""
    from torch_xla.utils import dlpack

    return dlpack.from_dlpack(external)


def _get_tensors_handle(tensors: list) -> list[int]:
    """A handle per tensor naming its device buffer (equal for tensors on one buffer)."""
    from torch_xla.lazy import functional, graph, nodes

    handles = []
    for t in tensors:
        node = functional.unwrap(t)._node
        if node.rule is not None:
            raise RuntimeError("_get_tensors_handle: a tensor's value is still pending, so it "
                               "has no device buffer yet; sync it first (torch_xla.sync()).")
        if isinstance(node, nodes.Placeholder):  # a parameter to trace with: its own name
            handles.append(id(node))
            continue
        graph.check_not_donated([node])
        if node.array.is_deleted():
            raise RuntimeError("_get_tensors_handle: the tensor's device buffer is deleted.")
        handles.append(id(node.array))
    return handles


def _set_ir_debug(enabled: bool) -> None:
    """Record the user's Python line on the IR nodes created from now on (what
    XLA_IR_DEBUG=1 turns on at start): errors and graph dumps name it."""
    from torch_xla.lazy import ir

    ir.set_debug(enabled)


def _set_xla_custom_op_name_prefix(tensor: Any, op_name_prefix: str,
                                   max_call_stack_depth: int = 0) -> bool:
    """Name the op computing `tensor` in the HLO metadata: its instructions' `op_name`
    becomes `op_name_prefix` + the op type (`aten__relu`), as PyTorch/XLA writes it, which
    profilers group by. True for every XLA tensor, as PyTorch/XLA's binding (which
    makes device data an IR node first): device data keeps the name, and a program
    reading it names no op by it (custom_debug_lowering's modes name every tensor they
    see, `model.to('xla')` included). `max_call_stack_depth` (PyTorch/XLA: how many
    Python frames go with the name) is accepted; source frames are not attached here."""
    from torch_xla.lazy import functional

    functional.unwrap(tensor)._node.scope = str(op_name_prefix)
    return True


def _get_ir_debug() -> bool:
    from torch_xla.lazy import ir

    return ir.IR_DEBUG


def _get_xla_tensor_debug_info(tensor: Any) -> str:
    """What the engine holds for one tensor, in PyTorch/XLA's layout: its IR node while
    pending, its device data (`Data Shape: f32[16]`) once computed; in SPMD mode on the
    virtual device `SPMD:0`, data shown as `XLAShardedData` with its sharding.
    `Tensor on host` is the size of a CPU tensor whose upload the virtual device defers
    (`nodes.HostData`), None otherwise."""
    import torch

    from torch_xla.lazy import dump, functional, graph, nodes, sharding

    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "xla":
        return "Not a XLATensor\n"
    inner = functional.unwrap(tensor)
    node, index = inner.value
    aval = node.avals[index]
    device = _debug_device_name(node.device)
    lines = ["XLATensor {", f"TensorID: {id(inner)}", f"Device: {device}",
             f"XLA Shape: {dump.xla_type(aval)}",
             f"ShardingSpec: {sharding.spec(inner) or 'None'}"]
    on_host = "None"
    if isinstance(node, graph.Dropped):
        lines += ["IR: None", "XLAData: None (its pending value was dropped)"]
    elif type(node) is nodes.HostData and node.host is not None:
        lines += ["IR: None", "XLAData: None"]
        on_host = f"with size {list(aval[0])}"
    elif node.rule is None:
        # sharded data carries PyTorch/XLA's device_data IR (its sharding is set on one)
        ir_text = (f"xla::device_data, xla_shape={dump.xla_type(aval)}, device={device}"
                   if node.annotated else "None")
        lines += [f"IR: {ir_text}", *_data_debug_lines(node, dump.xla_type(aval), device)]
    else:
        lines += [f"IR: {dump.op_name(node.op)} output {index}", "XLAData: None"]
    lines += [f"Tensor on host: {on_host}", "}"]
    return "\n".join(lines) + "\n"


def _debug_device_name(index: int) -> str:
    """The device a tensor is on as PyTorch/XLA names it: `SPMD:0` (the virtual device)
    in SPMD mode, else the runtime device."""
    from torch_xla.pjrt import spmd

    return "SPMD:0" if spmd.enabled() else _runtime_name_of(index)


def _data_debug_lines(node: Any, shape_text: str, device: str) -> list[str]:
    """PyTorch/XLA's lines for a tensor's device data: `XLAShardedData` with the layout
    (the annotation for uneven tiles) and the number of devices holding it, in SPMD mode."""
    from torch_xla.lazy import sharding
    from torch_xla.pjrt import spmd
    from torch_xla.pjrt.client import client

    if not spmd.enabled():
        handle = "Deleted" if node.array.is_deleted() else id(node.array)  # donated
        return ["XLAData: ", f"  Data Device: {device}", f"  Data Shape: {shape_text}",
                f"  Data Handle: {handle}"]
    laid_out = sharding.data_layout(node) or node.array.sharding
    text = spmd.sharding_text(laid_out, node.array.ndim, client().global_devices)
    return ["XLAShardedData: ", f"  Data Device: {device}", f"  Data Shape: {shape_text}",
            f"  OpSharding: {text}", f"  NumShards: {len(node.array.sharding.device_set)}"]


def _runtime_name_of(index: int) -> str:
    from torch_xla.pjrt.client import client

    return _runtime_name(client().device(index))


def _lowered(tensors: list, graph: tuple | None = None, name: str | None = None) -> Any:
    """The graph computing `tensors` (`graph`: their `_pending_graph`, if already walked),
    lowered (not compiled); `name`: the HLO module's (`jit_<name>`). A graph holding
    collectives is lowered as the replicated program of as many replicas as they name.
    Every leaf is a parameter of the module, in order, also one only its shape is read."""
    import jax

    from torch_xla.lazy import compiler, dtype_policy, ir, manual, replicas

    order, position, leaves, values = graph or _pending_graph(tensors)
    fn = compiler.graph_function(order, position, leaves, values, exported=True)
    if name:
        fn.__name__ = fn.__qualname__ = name
    # a leaf without a value (a placeholder to trace with) lowers from its shape alone,
    # with the sharding it was marked with
    args = [jax.ShapeDtypeStruct(leaf.avals[0][0], dtype_policy.STORAGE[leaf.avals[0][1]],
                                 sharding=leaf.annotated or None)
            if isinstance(leaf, ir.NoBuffer) else leaf.array for leaf in leaves]
    world = _collective_world(order)
    if world is None:
        with manual.partitioner(order):
            return jax.jit(fn, keep_unused=True).lower(*args)
    return replicas.lower_view(fn, args, [n.avals[i] for n, i in values], world)


def _collective_world(order: list) -> int | None:
    """The most replicas a collective of the graph names (None: it holds no collective)."""
    worlds = [dict(n.template[1]).get("world", 1) for n in order
              if getattr(n.rule, "collective", False)]
    return max(worlds, default=None)


class LoweringContext:
    """`torch_xla._XLAC.lowering.LoweringContext`: the HLO module computing some XLA
    tensors (`build`), and which tensors are its parameters. Nothing runs.

    Parameters are the device data the graph reads, numbered in the order of
    `_get_tensors_xla_device_data_node`; a tensor whose value is still pending is none.
    `hlo()` is the module's serialized HloModuleProto (what
    `xb.computation_from_module_proto` reads); `hlo_text()` is its HLO text as
    `_get_xla_tensors_hlo` prints it (PyTorch/XLA prints the proto's text format, which
    jaxlib has no schema to print)."""

    def __init__(self, name: str = "", device: Any = None) -> None:
        self._name = str(name)
        self._lowered: Any = None
        self._leaves: list = []

    def build(self, tensors: list) -> None:
        """Lower the graph computing `tensors` (their pending ops; a sync after it still
        runs them)."""
        graph = _pending_graph(list(tensors))
        self._lowered = _lowered(tensors, graph, self._name or "lowering_context")
        self._leaves = graph[2]

    def _built(self) -> Any:
        if self._lowered is None:
            raise RuntimeError("LoweringContext: call build(tensors) first.")
        return self._lowered

    def hlo(self) -> bytes:
        from torch_xla.lazy import dump

        return dump.xla_computation(self._built()).as_serialized_hlo_module_proto()

    def hlo_text(self) -> str:
        from torch_xla.lazy import dump

        return dump.hlo_text(self._built())

    def hlo_json(self) -> str:
        raise NotImplementedError(
            "LoweringContext.hlo_json: jaxlib has no protobuf schema of HLO to write the "
            "module as JSON; use hlo() (the serialized HloModuleProto) or hlo_text().")

    def device_parameter_id_tensor_mapping(self) -> dict[int, Any]:
        """{parameter number: the XLA tensor it reads}; no data moves."""
        from torch_xla.lazy import functional
        from torch_xla.lazy.tensor import XLATensor

        self._built()
        return {k: functional.wrap(XLATensor(leaf)) for k, leaf in enumerate(self._leaves)}

    def parameter_id_tensor_mapping(self) -> dict[int, Any]:
        """{parameter number: its value on the CPU}."""
        return {k: t.cpu() for k, t in self.device_parameter_id_tensor_mapping().items()}

    def tensor_parameter_id(self, tensor: Any) -> int:
        """The parameter number of `tensor`'s device data, or -1 when the module reads no
        such parameter (a pending value, data the graph does not read)."""
        from torch_xla.lazy import functional, ir

        self._built()
        node, _ = functional.unwrap(tensor).value
        if isinstance(node, ir.Data):
            for k, leaf in enumerate(self._leaves):
                if leaf is node:
                    return k
        return -1

    def set_name_string(self, name: str) -> None:
        self._name = str(name)

    def get_name_string(self) -> str:
        return self._name


# PyTorch/XLA's submodule of _XLAC that holds it
lowering = types.SimpleNamespace(LoweringContext=LoweringContext)


def _get_xla_tensors_hlo(tensors: list) -> str:
    """The HLO module (before XLA's optimizations) that computes `tensors`, printed as
    PyTorch/XLA prints it (`%name.N = ...`); nothing runs."""
    from torch_xla.lazy import dump

    return dump.hlo_text(_lowered(tensors))


def _get_stablehlo(tensors: list, device: str = _DEFAULT_DEVICE, devices: list | None = None,
                   emit_bytecode: bool = False) -> bytes:
    """The StableHLO module that computes `tensors`, as text (or MLIR bytecode)."""
    if not tensors:
        from torch_xla.lazy.tensor import pending_tensors

        tensors = pending_tensors()  # engine tensors: `functional.unwrap` takes them as they are
    from torch_xla.lazy import dump

    lowered = _lowered(tensors)
    if emit_bytecode:
        from jax._src.interpreters import mlir

        return mlir.module_to_bytecode(lowered.compiler_ir("stablehlo"))
    # XLA_HLO_DEBUG / XLA_IR_DEBUG: each op's location (`#loc` lines), as PyTorch/XLA's
    return lowered.as_text(debug_info=dump.FRAMES).encode()


def _ensure_xla_coordinator_initialized(global_rank: int, world_size: int, master_addr: str,
                                        master_port: int | None = None) -> None:
    """Join the job's coordinator (jax's distributed runtime), unless this process has."""
    from torch_xla.pjrt import distributed

    port = distributed.DEFAULT_COORDINATOR_PORT if master_port is None else master_port
    distributed.ensure_joined(global_rank, world_size, master_addr, port)


def _activate_preemption_sync_manager() -> None:
    from torch_xla.experimental.distributed_checkpoint import _preemption

    _preemption.activate()


def _deactivate_preemption_sync_manager() -> None:
    from torch_xla.experimental.distributed_checkpoint import _preemption

    _preemption.deactivate()


def _sync_point_reached(step: int) -> bool:
    """Whether every process of the job is to checkpoint at `step` for a preemption."""
    from torch_xla.experimental.distributed_checkpoint import _preemption

    return _preemption.sync_point_reached(step)
