"""`torch_xla.core.xla_model` (xm): the PyTorch/XLA user API for devices and steps."""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import itertools
import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import IO, Any, TypedDict

import torch
from torch.utils._pytree import tree_leaves, tree_map_only

import torch_xla
import torch_xla.runtime as xr
from torch_xla._atomic import atomic_open
from torch_xla.lazy import functional, graph, ir, nodes, rng, sharding, special
from torch_xla.lazy.replicas import rendezvous as replica_rendezvous
from torch_xla.lazy.tensor import device_index, not_xla_error
from torch_xla.lowering import collectives
from torch_xla.pjrt import distributed, spmd, threads
from torch_xla.pjrt.client import client
from torch_xla.plugins.env import env_int
from torch_xla.utils import utils as xu

# The `xla` operator namespace, PyTorch/XLA's: custom ops are defined in it and given an
# XLA kernel, which the engine runs on XLA tensors (often a `call_jax` of a JAX kernel):
#     XLA_LIB.define("gelu_tanh(Tensor x) -> Tensor")
#     @torch.library.impl(XLA_LIB, "gelu_tanh", "XLA")
#     def gelu_tanh_xla(x): return xb.call_jax(jax_gelu_tanh, (x,))
XLA_LIB = torch.library.Library("xla", "DEF")


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """`xla:n` (xla:0 by default); checks that the device exists (this starts the runtime).

    Raises IndexError when this process has no device `n`. `devkind` must name the
    active device type if given (PyTorch/XLA deprecated it: one type per process).
    """
    if devkind is not None and devkind.upper() != xr.device_type():
        raise RuntimeError(f"xla_device(devkind={devkind!r}): this process runs on "
                           f"{xr.device_type()} devices only.")
    index = device_index(None) if n is None else int(n)
    count = client().device_count()
    if not 0 <= index < count:
        raise IndexError(f"Device index {index} out of range: xla:{index} does not exist; this "
                         f"process has {count} device(s), {get_xla_supported_devices()}.")
    return torch.device("xla", index)


def xla_device_kind(device: str | torch.device | None = None) -> str:
    """The PJRT device kind of `device` (xla:0 by default), as the runtime reports it:
    e.g. 'cpu', 'NVIDIA H100 80GB HBM3', 'TPU v5 lite'."""
    return str(xr.runtime_device_attributes(xla_device() if device is None else device)[
        "device_kind"])


def is_xla_tensor(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "xla"


def parse_xla_device(device: str) -> tuple[str, int] | None:
    """`('CPU', 3)` for the runtime device name `'CPU:3'`; None for anything else."""
    match = re.fullmatch(r"([A-Z]+):(\d+)", device)
    return (match.group(1), int(match.group(2))) if match else None


def mark_step(wait: bool = False, reset_scope: bool = True) -> None:
    """Compile (or fetch from cache) and run everything pending, as one graph per device.

    `wait` (or XLA_SYNC_WAIT=1) blocks until the devices finished. With `reset_scope`
    (the default) marking a step inside an open `xp.Trace` scope raises
    `OpenScopeError` (a RuntimeError), as PyTorch/XLA does.
    """
    if reset_scope:
        ir.require_no_open_scope()
    graph.mark_step()
    _run_step_closures()
    if wait:
        wait_device_ops()


def optimization_barrier_(tensors: list[torch.Tensor]) -> None:
    """Give `tensors` (in place) their values through one XLA optimization barrier: the
    compiler moves no computation across it (e.g. to keep rematerialization apart)."""
    special.optimization_barrier_(tensors)


def wait_device_ops(devices: list | None = None) -> None:
    """Block until every computation handed to the devices (and async closures) finished."""
    graph.wait_device_ops()
    _wait_async_closures()


def get_rng_state(device: torch.device | None = None) -> int:
    return rng.get_state()


def set_rng_state(seed: int, device: torch.device | None = None) -> None:
    rng.set_state(seed)


# --- training-loop API (issue 4) ---------------------------------------------

# Each thread's closures (key: its current device, None if it chose none), run by its
# own mark_step: replica threads step independently.
_closures: dict[int | None, list[tuple[Callable[..., Any], tuple]]] = {}


def add_step_closure(
    closure: Callable[..., Any], args: tuple = (), run_async: bool = False
) -> None:
    """Run `closure(*args)` after the next step has executed.

    Use it to read values of the step (losses, accuracy) without cutting the
    graph in the middle of the step. With `run_async=True` the closure runs in
    a background thread, in order with other asynchronous closures.
    """
    _closures.setdefault(threads.current(), []).append(
        (closure if not run_async else _run_async(closure), tuple(args)))


class _AsyncClosures:
    """Runs asynchronous step closures in order on one background thread.

    As in PyTorch/XLA, a closure that raises stops the ones queued after it, and the
    error is raised (as the cause of a RuntimeError) by the next step that has an
    asynchronous closure to run.
    """

    def __init__(self) -> None:
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None
        self._error: BaseException | None = None
        self._submitted = 0  # closures handed to the worker so far
        self._dropped_up_to = 0  # those queued when a closure failed are not run
        self._lock = threading.Lock()

    def submit(self, closure: Callable[..., Any], args: tuple) -> None:
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise RuntimeError(
                "Cannot run asynchronous closure due to previously raised exception"
            ) from error
        if self._worker is None:
            self._worker = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="xla-step-closure"
            )
        self._submitted += 1
        self._worker.submit(self._run, self._submitted, closure, args)

    def _run(self, number: int, closure: Callable[..., Any], args: tuple) -> None:
        if number <= self._dropped_up_to:
            return
        try:
            closure(*args)
        except Exception as error:
            with self._lock:
                self._error = error
                self._dropped_up_to = self._submitted

    def wait(self) -> None:
        if self._worker is not None:
            self._worker.submit(lambda: None).result()


_async_closures = _AsyncClosures()


def _run_async(closure: Callable[..., Any]) -> Callable[..., Any]:
    def submit(*args: Any) -> None:
        _async_closures.submit(closure, args)

    return submit


def _run_step_closures() -> None:
    for closure, args in _closures.pop(threads.current(), ()):
        closure(*args)


def _wait_async_closures() -> None:
    _async_closures.wait()


def optimizer_step(
    optimizer: torch.optim.Optimizer,
    barrier: bool = False,
    optimizer_args: dict | None = None,
    groups: list[list[int]] | None = None,
    pin_layout: bool = True,
) -> Any:
    """Reduce gradients across replicas, step the optimizer; with `barrier`, mark the step.

    Returns what `optimizer.step()` returns (the loss when a closure is passed).
    """
    reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
    loss = optimizer.step(**(optimizer_args or {}))
    if barrier:
        mark_step()
    return loss


def reduce_gradients(
    optimizer: torch.optim.Optimizer, groups: list[list[int]] | None = None,
    pin_layout: bool = True,
) -> None:
    """Average the gradients of `optimizer`'s parameters over all replicas.

    As in PyTorch/XLA the sum is scaled by 1 / world_size() (also with `groups`).
    With `ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB` set above 0, the gradients are reduced in
    buckets of about that size, last layer first (`all_reduce_bucketized_gradients`).
    """
    count = xr.world_size()
    if count > 1:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if any(getattr(p, "_is_sharded", False) for p in params):
            raise RuntimeError(
                "xm.optimizer_step/reduce_gradients average gradients over the replicas, but "
                "this optimizer steps XlaFullyShardedDataParallel's shards, whose gradients "
                "are already averaged over the group and differ between replicas (each is a "
                "different part): call optimizer.step() instead.")
        gradients = _fetch_gradients(optimizer)
        bucket_cap_mb = env_int(BUCKET_SIZE_ENV, 0, minimum=0)
        if bucket_cap_mb > 0:
            all_reduce_bucketized_gradients(
                gradients[::-1], scale=1.0 / count, groups=groups, pin_layout=pin_layout,
                bucket_cap_mb=bucket_cap_mb)
        else:
            all_reduce(REDUCE_SUM, gradients, scale=1.0 / count, groups=groups,
                       pin_layout=pin_layout)


def _fetch_gradients(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The gradients of `optimizer`'s parameters that have one, in parameter order, as
    `.data` aliases: a collective run on them in place (accelerate reduces gradients with
    `xm.all_reduce("sum", xm._fetch_gradients(opt), scale=...)`) updates `p.grad`."""
    return [p.grad.data for group in optimizer.param_groups for p in group["params"]
            if isinstance(p, torch.Tensor) and p.grad is not None]


BUCKET_SIZE_ENV = "ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB"


def all_reduce_bucketized_gradients(
    gradients: list[torch.Tensor], scale: float, groups: list[list[int]] | None,
    pin_layout: bool, bucket_cap_mb: int = 0,
) -> None:
    """Sum `gradients` over replicas, in place and scaled by `scale`, as one all-reduce per
    bucket: consecutive gradients are gathered until their bytes pass `bucket_cap_mb`
    MiB (a gradient larger than that is a bucket of its own; 0 makes every gradient
    its own bucket)."""
    cap = bucket_cap_mb * 1024 * 1024
    bucket: list[torch.Tensor] = []
    size = 0
    for grad in gradients:
        nbytes = grad.numel() * grad.element_size()
        if bucket and size + nbytes > cap:
            all_reduce(REDUCE_SUM, bucket, scale=scale, groups=groups, pin_layout=pin_layout)
            bucket, size = [], 0
        bucket.append(grad)
        size += nbytes
    if bucket:
        all_reduce(REDUCE_SUM, bucket, scale=scale, groups=groups, pin_layout=pin_layout)


# --- collectives ------------------------------------------------------------------
#
# Each checks its arguments (the rules live with the lowerings, in
# torch_xla/lowering/collectives.py) and records one node in the lazy graph; the step that
# holds it compiles as one program run by every replica (torch_xla/lazy/replicas.py).
# With one replica they reduce to plain tensor ops, unless XLA_ALWAYS_ALLREDUCE=1 asks
# for the collectives in the graph (`collectives.records`). Replica groups may name more
# replicas than the job has: such a graph can be printed (its HLO text), not run.

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_AND = "and"
REDUCE_OR = "or"
REDUCE_MIN = "min"
REDUCE_MAX = "max"


# While dynamo traces, xm's collectives over every replica emit torch's functional
# collectives instead (dynamo traces torch ops only); on XLA tensors the engine records
# them as the same nodes (`lazy/functional_collectives.py`).
_FUNCTIONAL = torch.ops._c10d_functional
@torch.compiler.assume_constant_result
def _traced_world_size() -> int:
    """`xr.world_size()`, read once while dynamo traces: a constant of the graph."""
    return xr.world_size()


def _traced(result: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """A functional collective's result, waited on, with dimension 0 moved to `dim`."""
    return _FUNCTIONAL.wait_tensor(result).movedim(0, dim)


def _record(rule: Callable, tensors: list[torch.Tensor], static: dict,
            shapes: list[tuple]) -> list[torch.Tensor]:
    """Record collective `rule` on user tensors; one new user tensor per output shape."""
    op = f"xla::{rule.__name__}"
    inner = [_engine_tensor(t, op) for t in tensors]
    avals = [(tuple(shape), t.dtype) for shape, t in zip(shapes, tensors, strict=True)]
    return [functional.wrap(t) for t in nodes.custom(rule, op, inner, static, avals)]


def _engine_tensor(t: Any, op: str) -> Any:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op} takes XLA tensors, got {type(t).__name__}")
    if t.device.type != "xla":
        raise not_xla_error(t)
    return functional.unwrap(t)


def _scaled(t: torch.Tensor, scale: float) -> torch.Tensor:
    return t.clone() if scale == 1.0 else (t * scale).to(t.dtype)


def _into(output: torch.Tensor | None, result: torch.Tensor) -> torch.Tensor:
    """`result` written into `output` (which takes its shape, as PyTorch/XLA's `_out` ops do)."""
    if output is None:
        return result
    with torch.no_grad():
        if output.shape != result.shape:
            output.resize_(result.shape)
        output.copy_(result)
    return output


def all_reduce(
    reduce_type: str, inputs: torch.Tensor | list[torch.Tensor], scale: float = 1.0,
    groups: list[list[int]] | None = None, pin_layout: bool = True,
) -> torch.Tensor | list[torch.Tensor]:
    """Reduce over replicas. A tensor gives a new tensor; a list is reduced in place."""
    collectives.check_reduce_type(reduce_type)
    single = isinstance(inputs, torch.Tensor)
    if single and groups is None and torch.compiler.is_compiling():
        op = collectives.TORCH_OP_OF_REDUCE_TYPE[reduce_type]
        result = _traced(_FUNCTIONAL.all_reduce(inputs, op, ""))
        return _scaled(result, scale) if scale != 1.0 else result
    tensors = [inputs] if single else list(inputs)
    if not tensors:
        return inputs
    groups = collectives.check_groups(groups, xr.world_size())
    world = collectives.span(groups, xr.world_size())
    if not collectives.records(world):
        results = [_scaled(t, scale) for t in tensors]
    else:
        static = dict(reduce_type=reduce_type, scale=float(scale), groups=groups, world=world)
        results = _record(collectives.all_reduce, tensors, static, [t.shape for t in tensors])
    if single:
        return results[0]
    for t, r in zip(tensors, results, strict=True):
        _into(t, r)
    return inputs


def all_gather(
    value: torch.Tensor, dim: int = 0, groups: list[list[int]] | None = None,
    output: torch.Tensor | None = None, pin_layout: bool = True,
) -> torch.Tensor:
    """Every replica's `value` of the group, concatenated along `dim` in replica order.

    A list of tensors is gathered by one collective (`output`: a list too)."""
    if isinstance(value, list):
        return _all_gather_coalesced(value, dim, groups, output, pin_layout)
    if groups is None and output is None and torch.compiler.is_compiling():
        dim = collectives.check_dim(value.shape, dim)
        return _traced(_FUNCTIONAL.all_gather_into_tensor(
            value.movedim(dim, 0), _traced_world_size(), ""), dim)
    groups = collectives.check_groups(groups, xr.world_size())
    world = collectives.span(groups, xr.world_size())
    dim = collectives.check_dim(value.shape, dim)
    if not collectives.records(world):
        return _into(output, value.clone())
    shape = collectives.resized(value.shape, dim, factor=collectives.group_size(groups, world))
    (result,) = _record(collectives.all_gather, [value],
                        dict(dim=dim, groups=groups, world=world), [shape])
    return _into(output, result)


def _all_gather_coalesced(
    values: list[torch.Tensor], dim: int, groups: list[list[int]] | None,
    output: list[torch.Tensor] | None, pin_layout: bool,
) -> list[torch.Tensor]:
    if pin_layout:
        raise RuntimeError("For xm.all_gather with a list of tensors, pin_layout=True is not "
                           "supported; pass pin_layout=False.")
    outputs = _outputs_for(values, output, "all_gather")
    groups = collectives.check_groups(groups, xr.world_size())
    world = collectives.span(groups, xr.world_size())
    dims = [collectives.check_dim(v.shape, dim) for v in values]
    if len(set(dims)) > 1:
        raise ValueError(f"all_gather: dim={dim} names different dimensions {dims} of tensors "
                         f"of shapes {[tuple(v.shape) for v in values]}; give a non-negative "
                         "dim.")
    if not collectives.records(world) or not values:
        results = [v.clone() for v in values]
    else:
        count = collectives.group_size(groups, world)
        shapes = [collectives.resized(v.shape, dims[0], factor=count) for v in values]
        results = _record(collectives.all_gather_coalesced, values,
                          dict(dim=dims[0], groups=groups, world=world), shapes)
    return [_into(o, r) for o, r in zip(outputs, results, strict=True)]


def reduce_scatter(
    reduce_type: str, input: torch.Tensor | list[torch.Tensor], scale: float,
    scatter_dim: int, shard_count: int, groups: list[list[int]] | None = None,
    output: torch.Tensor | list[torch.Tensor] | None = None, pin_layout: bool = True,
) -> torch.Tensor | list[torch.Tensor]:
    """Reduce over the group, then replica i of the group keeps part i along `scatter_dim`.

    A list of tensors is reduce-scattered tensor by tensor (into the list `output`, if
    given, whose tensors take the parts' shapes)."""
    if isinstance(input, list):
        outputs = _outputs_for(input, output, "reduce_scatter")
        return [reduce_scatter(reduce_type, t, scale, scatter_dim, shard_count, groups, o,
                               pin_layout) for t, o in zip(input, outputs, strict=True)]
    collectives.check_reduce_type(reduce_type)
    if groups is None and output is None and torch.compiler.is_compiling():
        dim = collectives.check_dim(input.shape, scatter_dim)
        op = collectives.TORCH_OP_OF_REDUCE_TYPE[reduce_type]
        result = _traced(_FUNCTIONAL.reduce_scatter_tensor(
            input.movedim(dim, 0), op, shard_count, ""), dim)
        return _scaled(result, scale) if scale != 1.0 else result
    groups = collectives.check_groups(groups, xr.world_size())
    world = collectives.span(groups, xr.world_size())
    count = collectives.check_parts(shard_count, groups, world, "reduce_scatter", "shard_count")
    dim = collectives.check_dim(input.shape, scatter_dim)
    collectives.check_divisible(input.shape, dim, count, "reduce_scatter")
    if not collectives.records(world):
        return _into(output, _scaled(input, scale))
    static = dict(reduce_type=reduce_type, scale=float(scale), dim=dim, groups=groups,
                  world=world)
    (result,) = _record(collectives.reduce_scatter, [input], static,
                        [collectives.resized(input.shape, dim, divisor=count)])
    return _into(output, result)


def all_to_all(
    value: torch.Tensor, split_dimension: int, concat_dimension: int, split_count: int,
    groups: list[list[int]] | None = None, pin_layout: bool = True,
) -> torch.Tensor:
    """Split `value` along `split_dimension`, send part i to replica i of the group, and
    concatenate what arrives along `concat_dimension` in replica order."""
    groups = collectives.check_groups(groups, xr.world_size())
    world = collectives.span(groups, xr.world_size())
    count = collectives.check_parts(split_count, groups, world, "all_to_all", "split_count")
    split_dim = collectives.check_dim(value.shape, split_dimension)
    concat_dim = collectives.check_dim(value.shape, concat_dimension)
    collectives.check_divisible(value.shape, split_dim, count, "all_to_all")
    if not collectives.records(world):
        return value.clone()
    shape = collectives.resized(value.shape, split_dim, divisor=count)
    shape = collectives.resized(shape, concat_dim, factor=count)
    static = dict(split_dim=split_dim, concat_dim=concat_dim, groups=groups, world=world)
    (result,) = _record(collectives.all_to_all, [value], static, [shape])
    return result


def collective_permute(value: torch.Tensor, pairs: list[list[int]]) -> torch.Tensor:
    """Send `value` from replica `src` to replica `dst` for each `[src, dst]` pair; a replica
    that receives nothing gets zeros."""
    pairs = collectives.check_pairs(pairs, xr.world_size())
    world = collectives.pairs_span(pairs, xr.world_size())
    if not collectives.records(world):
        return value.clone() if (0, 0) in pairs else torch.zeros_like(value)
    (result,) = _record(collectives.collective_permute, [value],
                        dict(pairs=pairs, world=world), [value.shape])
    return result


def _outputs_for(inputs: list[torch.Tensor], output: list[torch.Tensor] | None,
                 name: str) -> list[torch.Tensor | None]:
    if not isinstance(inputs, list) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError(f"{name}: `input_list` needs to be a list of tensors, "
                        f"got {type(inputs).__name__}")
    if output is None:
        return [None] * len(inputs)
    if len(output) != len(inputs):
        raise ValueError(f"{name}: `output` has {len(output)} tensors for {len(inputs)} inputs")
    return list(output)


def all_gather_bucketized(
    input_list: list[torch.Tensor], dim: int = 0, groups: list[list[int]] | None = None,
    output: list[torch.Tensor] | None = None, pin_layout: bool = False,
    bucket_cap_mb: int = 160,
) -> list[torch.Tensor]:
    """`all_gather` of each tensor of `input_list`. Each is one collective of the step's
    graph (XLA's combiner passes merge them), so `bucket_cap_mb` changes nothing."""
    if pin_layout:
        raise RuntimeError("For xm.all_gather_bucketized, pin_layout=True is not supported.")
    outputs = _outputs_for(input_list, output, "all_gather_bucketized")
    return [all_gather(t, dim=dim, groups=groups, output=o, pin_layout=False)
            for t, o in zip(input_list, outputs, strict=True)]


def reduce_scatter_bucketized(
    reduce_type: str, input_list: list[torch.Tensor], scale: float, scatter_dim: int,
    shard_count: int, groups: list[list[int]] | None = None,
    output: list[torch.Tensor] | None = None, pin_layout: bool = False,
    bucket_cap_mb: int = 160,
) -> list[torch.Tensor]:
    """`reduce_scatter` of each tensor of `input_list` (one collective each, as in
    `all_gather_bucketized`)."""
    outputs = _outputs_for(input_list, output, "reduce_scatter_bucketized")
    return [reduce_scatter(reduce_type, t, scale, scatter_dim, shard_count, groups=groups,
                           output=o, pin_layout=pin_layout)
            for t, o in zip(input_list, outputs, strict=True)]


def collective_broadcast(tensors: list[torch.Tensor], root_ordinal: int = 0,
                         groups: list[list[int]] | None = None, pin_layout: bool = True) -> None:
    """Overwrite `tensors`, in place, with replica `root_ordinal`'s values."""
    with torch.no_grad():
        for t in tensors:
            # The 1-or-0 factor is data, not a constant: every replica compiles one program.
            keep = torch.tensor(1 if xr.global_ordinal() == root_ordinal else 0, dtype=t.dtype)
            t.mul_(send_cpu_data_to_device(keep, t.device)[0])
    all_reduce(REDUCE_SUM, tensors, groups=groups, pin_layout=pin_layout)


def is_master_ordinal(local: bool = True) -> bool:
    """Whether this process's default device is ordinal 0 (of this host, or of the job)."""
    return (xr.local_ordinal() if local else xr.global_ordinal()) == 0


def master_print(*args: Any, fd: IO[str] | None = None, local: bool = False,
                 flush: bool = False) -> None:
    """`print` (to `fd`, default stdout) on the master ordinal only (of the job, or of
    this host with `local=True`)."""
    if is_master_ordinal(local=local):
        print(*args, file=fd if fd is not None else sys.stdout, flush=flush)


def xrt_world_size(defval: int = 1) -> int:
    """Deprecated: use `torch_xla.runtime.world_size()`."""
    warnings.warn("xm.xrt_world_size() is deprecated; use torch_xla.runtime.world_size()",
                  DeprecationWarning, stacklevel=2)
    return xr.world_size()


def get_ordinal(defval: int = 0) -> int:
    """Deprecated: use `torch_xla.runtime.global_ordinal()`."""
    warnings.warn("xm.get_ordinal() is deprecated; use torch_xla.runtime.global_ordinal()",
                  DeprecationWarning, stacklevel=2)
    return xr.global_ordinal()


def get_local_ordinal(defval: int = 0) -> int:
    """Deprecated: use `torch_xla.runtime.local_ordinal()`."""
    warnings.warn("xm.get_local_ordinal() is deprecated; use torch_xla.runtime.local_ordinal()",
                  DeprecationWarning, stacklevel=2)
    return xr.local_ordinal()


def get_xla_supported_devices(devkind: str | None = None, max_devices: int | None = None
                              ) -> list[str]:
    """The devices this process drives, as `xla:N` strings (of `devkind` if given;
    PyTorch/XLA deprecated `devkind`, a process has one device type)."""
    if devkind is not None and devkind.upper() != xr.device_type():
        return []
    count = xr.addressable_device_count()
    if max_devices:
        count = min(count, max_devices)
    return [f"xla:{i}" for i in range(count)]


def set_replication(device: torch.device | str,
                    devices: list[torch.device | str] | None) -> None:
    """Make `device` the calling thread's xla device, within the replica set `devices`.

    PyTorch/XLA's set-up of a replica (accelerate calls it in every process with
    `get_xla_supported_devices()`). Here replicas are `xmp.spawn`'s processes, or its
    threads when one process drives several devices, and they are set up by it: `devices`
    is checked to hold `device` and only this process's devices, and the thread's device
    is set, as PyTorch/XLA's `_xla_set_default_device` does.
    """
    local = get_xla_supported_devices()
    name = _device_name(device)
    names = [_device_name(d) for d in devices or []]
    if names and name not in names:
        raise ValueError(f"set_replication: {name} is not one of the replica devices {names}; "
                         "pass the devices the replicas run on, the device among them.")
    foreign = [d for d in [name, *names] if d not in local]
    if foreign:
        raise ValueError(
            f"set_replication: {', '.join(sorted(set(foreign)))} not among this process's "
            f"devices {local}; replicas on other processes are set up by xmp.spawn "
            "(or torch_xla.launch), each process naming its own devices.")
    torch_xla._XLAC._xla_set_default_device(name)


def _device_name(device: torch.device | str) -> str:
    """`xla:N` for an xla device (`xla` alone is the calling thread's)."""
    return f"xla:{torch_xla._XLAC._xla_get_device_ordinal(device)}"


def xla_real_devices(devices: list[torch.device | str] | None = None) -> list[str]:
    """Runtime names (`'CPU:0'`, ...) of `xla:N` devices (default: this process's)."""
    return torch_xla._XLAC._xla_real_devices(
        None if not devices else [str(d) for d in devices])


def xla_device_hw(device: torch.device | str) -> str:
    """The hardware type (`'CPU'`, ...) behind an `xla:N` device."""
    device = torch.device(device)
    if device.type != "xla":
        raise ValueError(f"{device} is not an XLA device; expected xla:N")
    return xla_real_devices([device])[0].split(":")[0]


def xla_replication_devices(local_devices: list[torch.device | str]) -> list[str]:
    """Runtime names of every device of the job that replication over `local_devices`
    (all of this process's devices) spans, by global ordinal."""
    kinds = {parse_xla_device(d)[0] for d in xla_real_devices(local_devices)}
    if len(kinds) != 1:
        raise RuntimeError(f"Cannot replicate across different device types: {kinds} "
                           f"for devices {local_devices}.")
    everyone = get_xla_supported_devices()
    if len(local_devices) != len(everyone):
        raise RuntimeError(f"Cannot replicate over {len(local_devices)} device(s) of this "
                           f"process: replication spans all of them ({everyone}).")
    kind = kinds.pop()
    found = [d for d in torch_xla._XLAC._xla_get_all_devices() if d.startswith(kind + ":")]
    return sorted(found, key=lambda d: parse_xla_device(d)[1])


def unlazy(tensors: list[torch.Tensor]) -> None:
    """Compute `tensors` and wait until they are on the device (for benchmarks)."""
    torch_xla._XLAC._xla_sync_multi(tensors, devices=[], wait=True)


def rendezvous(tag: str, payload: bytes = b"", replicas: list[int] | None = None) -> list[bytes]:
    """Wait for the replicas (default: all) to reach `tag`; returns their payloads in the
    order of `replicas` (by ordinal when None). Only the listed replicas call it. In SPMD
    over several processes the replicas are the processes (`replicas` lists process
    indices)."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise TypeError(f"rendezvous: payload must be bytes, not {type(payload).__name__}; "
                        "encode text first, e.g. payload.encode()")
    if spmd.over_processes():  # the processes are the replicas (indexed as processes)
        return distributed.exchange(tag, bytes(payload), ranks=replicas or None)
    if xr.world_size() == 1:
        return [bytes(payload)]
    if not replicas or list(replicas) == list(range(xr.world_size())):
        return replica_rendezvous(tag, bytes(payload))  # across threads too
    if xr.world_size() != distributed.process_count():
        raise NotImplementedError(
            f"rendezvous among a subset of replicas ({replicas}) needs one replica per "
            f"process; this job has {xr.world_size()} replicas in "
            f"{distributed.process_count()} processes. Call it on every replica (replicas=None)."
        )
    return distributed.exchange(tag, bytes(payload), ranks=replicas or None)


def mesh_reduce(tag: str, data: Any, reduce_fn: Callable[[list[Any]], Any]) -> Any:
    """`reduce_fn` of every replica's `data` (XLA tensors arrive as CPU tensors); in SPMD
    over several processes, of every process's."""
    if xr.world_size() == 1 and not spmd.over_processes():
        return reduce_fn([_to_cpu(data)])
    buffer = io.BytesIO()
    torch.save(_to_cpu(data), buffer)
    payloads = rendezvous(tag, buffer.getvalue())
    return reduce_fn([torch.load(io.BytesIO(p), weights_only=False) for p in payloads])


class RateTracker:
    """Items per second: `rate()` since the last call (smoothed), `global_rate()` overall."""

    def __init__(self, smooth_factor: float | None = None) -> None:
        self._smooth_factor = 0.4 if smooth_factor is None else smooth_factor
        self._start = self._last = time.time()
        self._total = 0.0
        self._since_last = 0.0
        self._last_rate: float | None = None

    def add(self, count: float) -> None:
        self._since_last += count

    def rate(self) -> float:
        now = time.time()
        elapsed = now - self._last
        if elapsed <= 0:
            return self._last_rate or 0.0
        current = self._since_last / elapsed
        if self._last_rate is not None:
            current = (1 - self._smooth_factor) * current + self._smooth_factor * self._last_rate
        self._total += self._since_last
        self._since_last = 0.0
        self._last, self._last_rate = now, current
        return current

    def global_rate(self) -> float:
        elapsed = time.time() - self._start
        return (self._total + self._since_last) / elapsed if elapsed > 0 else 0.0


def _to_cpu(data: Any) -> Any:
    """`data` with each XLA tensor replaced by a CPU copy. Aliases of one device value
    share one copy, as their CPU counterparts share storage: a state dict holds a tied
    weight under two names (two `param.detach()`s), which `torch.save` then writes once
    and transformers' `save_pretrained` recognises as tied."""
    # (id of the node, output index) -> (the node, its copy): holding the node keeps its
    # id from going to another node while the map runs (reading a pending tensor
    # replaces its node with the computed one).
    copies: dict[tuple[int, int], tuple[Any, torch.Tensor]] = {}

    def move(t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "xla":
            return t
        inner = functional.unwrap(t)
        key = graph.value_key(inner)
        if key not in copies:
            copies[key] = (inner._node, t.detach().to("cpu"))
        return copies[key][1]

    return tree_map_only(torch.Tensor, move, data)


def _maybe_convert_to_cpu(data: Any, convert: bool = True) -> Any:
    """`data` (any nesting) with its pending XLA tensors computed in one graph and, with
    `convert`, every XLA tensor replaced by a CPU copy (transformers saves a model's
    `state_dict()` on an xla device through it). The copies are made all at once, as
    `xm.save` makes them; `torch_xla.utils.serialization.save` holds one at a time."""
    graph.compute_pending(data)
    return _to_cpu(data) if convert else data


def _join_reads(data: Any) -> None:
    """On a process that does not use `data`'s values while another moves them to the
    CPU (`_maybe_convert_to_cpu`): in SPMD over several processes, join that process's
    collectives (computing what is pending, reading the tensors whose tiles lie on
    several processes). Otherwise nothing."""
    if spmd.over_processes():
        graph.compute_pending(data)
        graph.join_reads(data, distinct=True)


def save(
    data: Any, file_or_path: str | os.PathLike | IO[bytes], master_only: bool = True,
    global_master: bool = False,
) -> None:
    """`torch.save` with XLA tensors moved to the CPU, on the master ordinal only.

    A path is written atomically: an interrupted save leaves the previous file, and
    the next save to it removes the temporary file a killed one left. The file gets
    the permissions `torch.save` gives; errors name `file_or_path`. In SPMD over several
    processes every process reads the values (tiles come by collectives), one writes.
    """
    writer = not master_only or is_master_ordinal(local=not global_master)
    if writer:
        cpu_data = _maybe_convert_to_cpu(data)  # pending tensors computed in one graph
    else:
        _join_reads(data)
    if writer:
        if isinstance(file_or_path, (str, os.PathLike)):
            with atomic_open(file_or_path) as f:
                torch.save(cpu_data, f)
        else:
            torch.save(cpu_data, file_or_path)
    rendezvous("torch_xla.core.xla_model.save")


def xla_rendezvous(payload: bytes = b"", ordinals: list[int] | None = None,
                   tag: str | None = None) -> list[bytes]:
    """Share `payload` with every replica; returns all payloads by ordinal."""
    if ordinals and len(ordinals) != xr.global_device_count():
        raise ValueError(f"Only global rendezvous is supported: ordinals={ordinals}, but the "
                         f"job has {xr.global_device_count()} devices.")
    if not isinstance(payload, bytes):
        raise TypeError(f"`payload` must be bytes, not {type(payload).__name__}")
    return rendezvous(tag or "torch_xla.core.xla_model.xla_rendezvous", payload)


def do_on_ordinals(target: Callable[..., Any], data: tuple = (),
                   ordinals: tuple[int, ...] | list[int] = (0,)) -> Any:
    """`target(*data)` with `data`'s XLA tensors on the CPU, on `ordinals` only; then every
    replica meets. Returns `target`'s result where it ran, else None."""
    running = xr.global_ordinal() in ordinals
    result = None
    if running:
        result = target(*_maybe_convert_to_cpu(data))
    else:
        _join_reads(data)
    rendezvous("torch_xla.core.xla_model.do_on_ordinals")
    return result


def check_view_sharing(obj: Any) -> None:
    """Raise RuntimeError if two tensors inside `obj` (any nesting) share storage: two views
    of one XLA tensor, or two CPU tensors on one storage (saving them would not keep that)."""
    seen: dict[tuple[str, int], torch.Tensor] = {}
    for t in {id(t): t for t in tree_leaves(obj) if type(t) is torch.Tensor}.values():
        alias = _alias_of(t)
        if alias is None:
            continue
        other = seen.setdefault(alias, t)
        if other is not t:
            raise RuntimeError(
                f"Tensor {_describe(t)} is sharing a view with tensor {_describe(other)}; "
                "save or transfer their base instead and recreate the views afterwards.")


def _alias_of(t: torch.Tensor) -> tuple[str, int] | None:
    if is_xla_tensor(t):  # the engine copies on write: only views alias their base
        return ("xla", id(t._base)) if t._is_view() else None
    return ("torch", t.untyped_storage().data_ptr())


def _describe(t: torch.Tensor) -> str:
    return f"{t.dtype}{list(t.shape)} on {t.device}"


class ToXlaTensorArena:
    """Converts the objects `select_fn` picks anywhere inside a nesting with one call of
    `convert_fn` (the picked objects in a list, in the order `xu.for_each_instance` meets
    them; it returns their replacements in the same order), then puts each replacement
    where its object was (`xu.for_each_instance_rewrite`, which copies the nesting).
    PyTorch/XLA's helper for moving whole batches to and from the device."""

    def __init__(self, convert_fn: Callable[[list], list], select_fn: Callable[[Any], bool]
                 ) -> None:
        self._convert_fn = convert_fn
        self._select_fn = select_fn

    def transform(self, inputs: Any) -> Any:
        picked: list = []
        xu.for_each_instance(inputs, self._select_fn, picked.append)
        converted = list(self._convert_fn(picked)) if picked else []
        if len(converted) != len(picked):
            raise ValueError(f"ToXlaTensorArena: convert_fn returned {len(converted)} objects "
                             f"for the {len(picked)} it was given; return one per object, in "
                             "the same order.")
        replacements = iter(converted)
        return xu.for_each_instance_rewrite(inputs, self._select_fn,
                                            lambda _: next(replacements))


def send_cpu_data_to_device(datas: Any, device: torch.device | str,
                            input_sharding: Any = None) -> Any:
    """`datas` (any nesting: containers, objects' attributes, `xu.DataWrapper`s such as a
    wrapped PackedSequence) with each CPU tensor copied to `device`.

    As in PyTorch/XLA a single tensor comes back as a one-element list. In SPMD mode each
    copy is laid out over the devices: as `input_sharding` says, an `xs.ShardingSpec` for
    every tensor it fits (same rank) or a dict of them by key of a dict `datas` (each
    device receiving only its tiles; `minibatch`: each process holds only its part of the
    batch), and replicated (`{replicated}`) where no spec fits. As in PyTorch/XLA, a dict
    `input_sharding` needs a dict `datas` (ValueError) with a spec for every key (KeyError
    naming the missing keys).
    """
    if isinstance(input_sharding, dict):
        sharding.check_spmd("send_cpu_data_to_device(input_sharding=...)")
        return _send_by_key(datas, device, input_sharding)
    if type(datas) is torch.Tensor:
        datas = [datas]
    if input_sharding is not None:
        sharding.check_spmd("send_cpu_data_to_device(input_sharding=...)")
    return _send(datas, device, input_sharding)


def _send_by_key(datas: Any, device: torch.device | str, specs: dict) -> dict:
    """A dict batch, each key's data laid out as `specs[key]` says."""
    if not isinstance(datas, dict):
        raise ValueError("input batch should be a dict when input sharding is a dict "
                         f"(PyTorch/XLA's words): input_sharding has keys {list(specs)}, the "
                         f"data is a {type(datas).__name__}. Give a dict batch, or one "
                         "ShardingSpec for every tensor.")
    missing = [key for key in datas if key not in specs]
    if specs and missing:
        raise KeyError(f"Keys: {missing} are missing from input_sharding.")
    return {key: _send(value, device, specs.get(key)) for key, value in datas.items()}


def _send(datas: Any, device: torch.device | str, spec: Any) -> Any:
    def convert(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return [_copy(t, device, spec) for t in tensors]

    return ToXlaTensorArena(convert, _on_cpu).transform(datas)


def _on_cpu(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "cpu"


def _copy(t: torch.Tensor, device: torch.device | str, spec: Any) -> torch.Tensor:
    if not spmd.enabled():
        return t.to(device)
    if spec is None or not spec.can_apply(t):
        return _laid_out(t, client().replicated(), device)
    if spec.minibatch and t.dim() and t.shape[0] % xr.addressable_runtime_device_count():
        count = xr.addressable_runtime_device_count()
        raise RuntimeError(
            "When minibatch is configured, the per-host batch size must be divisible by local "
            f"runtime device count. Per host input data shape = {list(t.shape)}, "
            f"local_runtime_device_count = {count}. Give each process a batch that is a "
            f"multiple of {count}, or leave minibatch off to load the whole batch everywhere.")
    return _laid_out(t, spec.sharding(), device, local=bool(spec.minibatch))


def _laid_out(t: torch.Tensor, layout: Any, device: torch.device | str,
              local: bool = False) -> torch.Tensor:
    """`t` on the virtual device as `layout` (`local`: `t` is this process's part), asking
    for gradients as `t` does, as a copy by `t.to(device)` would."""
    moved = functional.wrap(sharding.from_host(t, layout, device_index(device), local=local))
    return moved.requires_grad_() if t.requires_grad else moved


def broadcast_master_param(model: torch.nn.Module) -> None:
    """Give every replica the master replica's parameters and buffers."""
    collective_broadcast(list(itertools.chain(model.parameters(), model.buffers())))
    mark_step()


@contextlib.contextmanager
def fork_rng(device: torch.device | str | None = None, enabled: bool = True) -> Iterator[None]:
    """Restore the device RNG state when the block ends."""
    if not enabled:
        yield
        return
    state = get_rng_state(device)
    try:
        yield
    finally:
        set_rng_state(state, device)


class MemoryInfo(TypedDict):
    bytes_used: int
    bytes_limit: int
    peak_bytes_used: int


def get_memory_info(device: torch.device | None = None) -> MemoryInfo:
    """Memory in use, the limit and the peak of `device` (default xla:0), as the runtime
    reports them; raises RuntimeError where the device reports none (the CPU)."""
    return torch_xla._XLAC._xla_memory_info(str(device if device is not None else xla_device()))


def get_stablehlo(tensors: list[torch.Tensor] | None = None) -> str:
    """The StableHLO text of the graph computing `tensors` (default: every pending tensor)."""
    return torch_xla._XLAC._get_stablehlo(tensors or [], "xla:0", [], False).decode("utf-8")


def get_stablehlo_bytecode(tensors: list[torch.Tensor] | None = None) -> bytes:
    """`get_stablehlo` as MLIR bytecode."""
    return torch_xla._XLAC._get_stablehlo(tensors or [], "xla:0", [], True)
