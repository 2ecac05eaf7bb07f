"""`torch_xla.core.xla_model` (xm): the PyTorch/XLA user API for devices and steps."""

from __future__ import annotations

import concurrent.futures
import io
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import IO, Any

import torch
from torch.utils._pytree import tree_map_only

import torch_xla.runtime as xr
from torch_xla._atomic import atomic_open
from torch_xla.lazy import functional, graph, nodes, rng
from torch_xla.lazy.tensor import not_xla_error
from torch_xla.lowering import collectives
from torch_xla.pjrt import distributed
from torch_xla.pjrt.client import client


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """`xla:n`; checks that the device exists (this starts the runtime client)."""
    index = 0 if n is None else int(n)
    client().device(index)
    return torch.device("xla", index)


def mark_step(wait: bool = False) -> None:
    """Compile (or fetch from cache) and run everything pending, as one graph per device."""
    graph.mark_step()
    _run_step_closures()
    if wait:
        wait_device_ops()


def wait_device_ops(devices: list | None = None) -> None:
    """Block until every computation handed to the devices (and async closures) finished."""
    graph.wait_device_ops()
    _wait_async_closures()


def get_rng_state(device: torch.device | None = None) -> int:
    return rng.get_state()


def set_rng_state(seed: int, device: torch.device | None = None) -> None:
    rng.set_state(seed)


# --- training-loop API (issue 4) ---------------------------------------------

_closures: list[tuple[Callable[..., Any], tuple]] = []
_async_closures: concurrent.futures.ThreadPoolExecutor | None = None


def add_step_closure(
    closure: Callable[..., Any], args: tuple = (), run_async: bool = False
) -> None:
    """Run `closure(*args)` after the next step has executed.

    Use it to read values of the step (losses, accuracy) without cutting the
    graph in the middle of the step. With `run_async=True` the closure runs in
    a background thread, in order with other asynchronous closures.
    """
    _closures.append((closure if not run_async else _run_async(closure), tuple(args)))


def _run_async(closure: Callable[..., Any]) -> Callable[..., Any]:
    def submit(*args: Any) -> None:
        global _async_closures
        if _async_closures is None:
            _async_closures = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="xla-step-closure"
            )
        _async_closures.submit(closure, *args)

    return submit


def _run_step_closures() -> None:
    pending, _closures[:] = list(_closures), []
    for closure, args in pending:
        closure(*args)


def _wait_async_closures() -> None:
    if _async_closures is not None:
        _async_closures.submit(lambda: None).result()


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
    """
    count = xr.world_size()
    if count > 1:
        gradients = [
            p.grad for group in optimizer.param_groups for p in group["params"]
            if p.grad is not None
        ]
        all_reduce(REDUCE_SUM, gradients, scale=1.0 / count, groups=groups, pin_layout=pin_layout)


# --- collectives ------------------------------------------------------------------
#
# Each checks its arguments (the rules live with the lowerings, in
# torch_xla/lowering/collectives.py) and records one node in the lazy graph; the step that
# holds it compiles as one program run by every replica (torch_xla/lazy/replicas.py).
# With one replica they reduce to plain tensor ops, as PyTorch/XLA's do.

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_AND = "and"
REDUCE_OR = "or"
REDUCE_MIN = "min"
REDUCE_MAX = "max"


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
    if output is None:
        return result
    with torch.no_grad():
        output.copy_(result)
    return output


def all_reduce(
    reduce_type: str, inputs: torch.Tensor | list[torch.Tensor], scale: float = 1.0,
    groups: list[list[int]] | None = None, pin_layout: bool = True,
) -> torch.Tensor | list[torch.Tensor]:
    """Reduce over replicas. A tensor gives a new tensor; a list is reduced in place."""
    collectives.check_reduce_type(reduce_type)
    single = isinstance(inputs, torch.Tensor)
    tensors = [inputs] if single else list(inputs)
    if not tensors:
        return inputs
    world = xr.world_size()
    groups = collectives.check_groups(groups, world)
    if world == 1:
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
    """Every replica's `value` of the group, concatenated along `dim` in replica order."""
    world = xr.world_size()
    groups = collectives.check_groups(groups, world)
    dim = collectives.check_dim(value.shape, dim)
    if world == 1:
        return _into(output, value.clone())
    shape = collectives.resized(value.shape, dim, factor=collectives.group_size(groups, world))
    (result,) = _record(collectives.all_gather, [value],
                        dict(dim=dim, groups=groups, world=world), [shape])
    return _into(output, result)


def reduce_scatter(
    reduce_type: str, input: torch.Tensor, scale: float, scatter_dim: int, shard_count: int,
    groups: list[list[int]] | None = None, output: torch.Tensor | None = None,
    pin_layout: bool = True,
) -> torch.Tensor:
    """Reduce over the group, then replica i of the group keeps part i along `scatter_dim`."""
    collectives.check_reduce_type(reduce_type)
    world = xr.world_size()
    groups = collectives.check_groups(groups, world)
    count = collectives.check_parts(shard_count, groups, world, "reduce_scatter", "shard_count")
    dim = collectives.check_dim(input.shape, scatter_dim)
    collectives.check_divisible(input.shape, dim, count, "reduce_scatter")
    if world == 1:
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
    world = xr.world_size()
    groups = collectives.check_groups(groups, world)
    count = collectives.check_parts(split_count, groups, world, "all_to_all", "split_count")
    split_dim = collectives.check_dim(value.shape, split_dimension)
    concat_dim = collectives.check_dim(value.shape, concat_dimension)
    collectives.check_divisible(value.shape, split_dim, count, "all_to_all")
    if world == 1:
        return value.clone()
    shape = collectives.resized(value.shape, split_dim, divisor=count)
    shape = collectives.resized(shape, concat_dim, factor=count)
    static = dict(split_dim=split_dim, concat_dim=concat_dim, groups=groups, world=world)
    (result,) = _record(collectives.all_to_all, [value], static, [shape])
    return result


def collective_permute(value: torch.Tensor, pairs: list[list[int]]) -> torch.Tensor:
    """Send `value` from replica `src` to replica `dst` for each `[src, dst]` pair; a replica
    that receives nothing gets zeros."""
    world = xr.world_size()
    pairs = collectives.check_pairs(pairs, world)
    if world == 1:
        return value.clone() if (0, 0) in pairs else torch.zeros_like(value)
    (result,) = _record(collectives.collective_permute, [value], dict(pairs=pairs),
                        [value.shape])
    return result


def is_master_ordinal(local: bool = True) -> bool:
    """Whether this process's default device is ordinal 0 (of this host, or of the job)."""
    return (xr.local_ordinal() if local else xr.global_ordinal()) == 0


def master_print(
    *args: Any, fd: IO[str] | None = None, finalizer: Callable | None = None
) -> None:
    """`print` (to `fd`, default stdout) on the master ordinal of the job only."""
    if is_master_ordinal(local=False):
        print(*args, file=fd if fd is not None else sys.stdout, flush=True)
        if finalizer is not None:
            finalizer()


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
    """The devices this process drives, as `xla:N` strings (of `devkind` if given)."""
    if devkind is not None and devkind.upper() != xr.device_type():
        return []
    count = xr.addressable_device_count()
    if max_devices is not None:
        count = min(count, max_devices)
    return [f"xla:{i}" for i in range(count)]


def xla_device_hw(device: torch.device | str) -> str:
    """The hardware type (`xr.device_type()`) behind an `xla:N` device."""
    device = torch.device(device)
    if device.type != "xla":
        raise ValueError(f"{device} is not an XLA device; expected xla:N")
    return xr.device_type()


def rendezvous(tag: str, payload: bytes = b"", replicas: list[int] | None = None) -> list[bytes]:
    """Wait for every replica to reach `tag`; returns every replica's payload in order."""
    if xr.world_size() == 1:
        return [payload]
    if replicas and sorted(replicas) != list(range(xr.world_size())):
        raise NotImplementedError(
            f"rendezvous among a subset of replicas ({replicas}) is not supported; "
            "call it on every replica (replicas=None)."
        )
    return distributed.exchange(tag, bytes(payload))


def mesh_reduce(tag: str, data: Any, reduce_fn: Callable[[list[Any]], Any]) -> Any:
    """`reduce_fn` of every replica's `data` (XLA tensors arrive as CPU tensors)."""
    if xr.world_size() == 1:
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
    return tree_map_only(
        torch.Tensor, lambda t: t.detach().to("cpu") if t.device.type == "xla" else t, data
    )


def save(
    data: Any, file_or_path: str | os.PathLike | IO[bytes], master_only: bool = True,
    global_master: bool = False,
) -> None:
    """`torch.save` with XLA tensors moved to the CPU, on the master ordinal only.

    A path is written atomically: an interrupted save leaves the previous file, and
    the next save to it removes the temporary file a killed one left. The file gets
    the permissions `torch.save` gives; errors name `file_or_path`.
    """
    if not master_only or is_master_ordinal(local=not global_master):
        graph.compute_pending(data)  # one graph for every pending tensor, not one per tensor
        cpu_data = _to_cpu(data)
        if isinstance(file_or_path, (str, os.PathLike)):
            with atomic_open(file_or_path) as f:
                torch.save(cpu_data, f)
        else:
            torch.save(cpu_data, file_or_path)
    rendezvous("torch_xla.core.xla_model.save")
