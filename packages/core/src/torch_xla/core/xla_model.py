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
from torch_xla.lazy import graph, replicas, rng
from torch_xla.lowering import collectives
from torch_xla.pjrt import distributed


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """`xla:n`; checks that the device exists (this starts the runtime client)."""
    from torch_xla.pjrt.client import client

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
# Each records one node in the lazy graph; the step that holds it compiles as one
# program run by every replica (torch_xla/lazy/replicas.py). With one replica they
# reduce to plain tensor ops, as PyTorch/XLA's do.

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_AND = "and"
REDUCE_OR = "or"
REDUCE_MIN = "min"
REDUCE_MAX = "max"


def _aval(t: torch.Tensor, shape: Any = None) -> tuple:
    return (tuple(t.shape) if shape is None else tuple(shape), t.dtype)


def _check_reduce_type(reduce_type: str) -> None:
    if reduce_type not in collectives.REDUCE_TYPES:
        raise ValueError(
            f"Unknown reduce_type {reduce_type!r}; use one of xm.REDUCE_SUM, REDUCE_MUL, "
            "REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX."
        )


def _scaled(t: torch.Tensor, scale: float) -> torch.Tensor:
    return t.clone() if scale == 1.0 else (t * scale).to(t.dtype)


def _into(output: torch.Tensor | None, result: torch.Tensor) -> torch.Tensor:
    if output is None:
        return result
    with torch.no_grad():
        output.copy_(result)
    return output


def _dim(t: torch.Tensor, dim: int) -> int:
    if not -t.dim() <= dim < max(t.dim(), 1):
        raise IndexError(f"dimension {dim} is out of range for a {t.dim()}-d tensor")
    return dim % t.dim()


def _divisible(t: torch.Tensor, dim: int, count: int, what: str) -> None:
    if t.shape[dim] % count:
        raise ValueError(
            f"{what}: dimension {dim} of size {t.shape[dim]} does not split into {count} "
            "equal parts (one per replica of the group)."
        )


def _groups_of(groups: list[list[int]] | None, parts: int, op: str, name: str) -> tuple:
    """(world size, checked groups, group size), after checking `parts` equals the group size."""
    world = xr.world_size()
    groups = collectives.check_groups(groups, world)
    count = collectives.group_size(groups, world)
    if parts != count:
        raise ValueError(f"{op}: {name}={parts}, but a group has {count} replicas; they must "
                         "be equal.")
    return world, groups, count


def all_reduce(
    reduce_type: str, inputs: torch.Tensor | list[torch.Tensor], scale: float = 1.0,
    groups: list[list[int]] | None = None, pin_layout: bool = True,
) -> torch.Tensor | list[torch.Tensor]:
    """Reduce over replicas. A tensor gives a new tensor; a list is reduced in place."""
    _check_reduce_type(reduce_type)
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
        results = replicas.record(
            collectives.all_reduce, "xla::all_reduce", tensors, static,
            [_aval(t) for t in tensors],
        )
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
    dim = _dim(value, dim)
    if world == 1:
        return _into(output, value.clone())
    shape = list(value.shape)
    shape[dim] *= collectives.group_size(groups, world)
    (result,) = replicas.record(
        collectives.all_gather, "xla::all_gather", [value],
        dict(dim=dim, groups=groups, world=world), [_aval(value, shape)],
    )
    return _into(output, result)


def reduce_scatter(
    reduce_type: str, input: torch.Tensor, scale: float, scatter_dim: int, shard_count: int,
    groups: list[list[int]] | None = None, output: torch.Tensor | None = None,
    pin_layout: bool = True,
) -> torch.Tensor:
    """Reduce over the group, then replica i of the group keeps part i along `scatter_dim`."""
    _check_reduce_type(reduce_type)
    world, groups, count = _groups_of(groups, shard_count, "reduce_scatter", "shard_count")
    dim = _dim(input, scatter_dim)
    _divisible(input, dim, count, "reduce_scatter")
    if world == 1:
        return _into(output, _scaled(input, scale))
    shape = list(input.shape)
    shape[dim] //= count
    static = dict(reduce_type=reduce_type, scale=float(scale), dim=dim, groups=groups,
                  world=world)
    (result,) = replicas.record(
        collectives.reduce_scatter, "xla::reduce_scatter", [input], static,
        [_aval(input, shape)],
    )
    return _into(output, result)


def all_to_all(
    value: torch.Tensor, split_dimension: int, concat_dimension: int, split_count: int,
    groups: list[list[int]] | None = None, pin_layout: bool = True,
) -> torch.Tensor:
    """Split `value` along `split_dimension`, send part i to replica i of the group, and
    concatenate what arrives along `concat_dimension` in replica order."""
    world, groups, count = _groups_of(groups, split_count, "all_to_all", "split_count")
    split_dim, concat_dim = _dim(value, split_dimension), _dim(value, concat_dimension)
    _divisible(value, split_dim, count, "all_to_all")
    if world == 1:
        return value.clone()
    shape = list(value.shape)
    shape[split_dim] //= count
    shape[concat_dim] *= count
    static = dict(split_dim=split_dim, concat_dim=concat_dim, groups=groups, world=world)
    (result,) = replicas.record(
        collectives.all_to_all, "xla::all_to_all", [value], static, [_aval(value, shape)]
    )
    return result


def collective_permute(value: torch.Tensor, pairs: list[list[int]]) -> torch.Tensor:
    """Send `value` from replica `src` to replica `dst` for each `[src, dst]` pair; a replica
    that receives nothing gets zeros."""
    world = xr.world_size()
    pairs = tuple((int(s), int(d)) for s, d in pairs)
    sources, targets = [s for s, _ in pairs], [d for _, d in pairs]
    if (len(set(sources)) != len(sources) or len(set(targets)) != len(targets)
            or not all(0 <= r < world for r in sources + targets)):
        raise ValueError(f"collective_permute: pairs {[list(p) for p in pairs]} must name "
                         f"replicas 0..{world - 1}, each at most once as source and as target.")
    if world == 1:
        return value.clone() if (0, 0) in pairs else torch.zeros_like(value)
    (result,) = replicas.record(
        collectives.collective_permute, "xla::collective_permute", [value],
        dict(pairs=pairs), [_aval(value)],
    )
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

    A path is written atomically: an interrupted save leaves the previous file.
    """
    if not master_only or is_master_ordinal(local=not global_master):
        from torch_xla.utils.serialization import compute_pending

        compute_pending(data)  # one graph for every pending tensor, not one per tensor
        cpu_data = _to_cpu(data)
        if isinstance(file_or_path, (str, os.PathLike)):
            with atomic_open(file_or_path) as f:
                torch.save(cpu_data, f)
        else:
            torch.save(cpu_data, file_or_path)
    rendezvous("torch_xla.core.xla_model.save")
