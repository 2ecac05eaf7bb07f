"""Ops without a lowering run on the CPU: inputs are computed and copied to the host,
the op runs eagerly, and its results come back as device data. Each run counts
`aten::<op>` in the metrics, as PyTorch/XLA does, so a slow step can be explained.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._ops import OpOverload
from torch.utils import _pytree as pytree

from torch_xla import _metrics
from torch_xla.lazy import graph, nodes, transfer
from torch_xla.lazy.tensor import XLATensor, not_xla_error


class XlaIndexError(IndexError, RuntimeError):
    """An index or dimension out of range in an op on XLA tensors. CPU torch raises
    IndexError, PyTorch/XLA RuntimeError: code written for either catches this."""


def run_cpu(func: OpOverload, args: tuple, kwargs: dict) -> Any:
    _metrics.counter(func._schema.name).inc()
    flat, spec = pytree.tree_flatten((args, kwargs))
    xla = [a for a in flat if type(a) is XLATensor]
    for a in flat:
        if isinstance(a, torch.Tensor) and type(a) is not XLATensor and a.dim() > 0:
            if not torch._is_functional_tensor(a):
                raise not_xla_error(a)
        elif isinstance(a, torch.UntypedStorage) and a.device.type == "xla":
            raise RuntimeError(STORAGE_ERROR)
    device = xla[0]._node.device if xla else _device_of(kwargs)
    graph.materialize(xla)
    host = {id(t): transfer.to_host(t._node.array, t.dtype) for t in xla}
    cpu_flat = [host[id(a)] if type(a) is XLATensor else _cpu_arg(a) for a in flat]
    cargs, ckwargs = pytree.tree_unflatten(cpu_flat, spec)
    try:
        out = func(*cargs, **ckwargs)
    except IndexError as error:
        if isinstance(error, RuntimeError):
            raise
        raise XlaIndexError(*error.args).with_traceback(error.__traceback__) from None
    _write_back(func, flat, cpu_flat)
    by_id = {id(c): a for a, c in zip(flat, cpu_flat, strict=False) if type(a) is XLATensor}
    return pytree.tree_map(lambda o: _to_xla(o, device, by_id), out)


STORAGE_ERROR = (
    "an XLA tensor's storage holds no bytes that PyTorch can read, index or print: its data "
    "lives on the device (`untyped_storage()` gives only its size). Read the values on the "
    "host instead: t.cpu() (and t.cpu().untyped_storage() for the bytes).")


def _cpu_arg(a: Any) -> Any:
    if isinstance(a, torch.device) and a.type == "xla":
        return torch.device("cpu")
    if isinstance(a, torch.Tensor) and torch._is_functional_tensor(a):
        torch._sync(a)
        return _cpu_arg(torch._from_functional_tensor(a))
    return a


def _device_of(kwargs: dict) -> int:
    return nodes.target_device(kwargs.get("device"))


def _to_xla(o: Any, device: int, by_id: dict) -> Any:
    if not isinstance(o, torch.Tensor):
        return o
    if id(o) in by_id:  # an in-place/out= op returned its (already written back) argument
        return by_id[id(o)]
    return nodes.from_host(o, device)


def _write_back(func: OpOverload, flat: list, cpu_flat: list) -> None:
    """Arguments the op wrote to (out=, in-place) take their new value."""
    if not any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments):
        return
    for a, c in zip(flat, cpu_flat, strict=False):
        if type(a) is XLATensor and c is not a:
            device = a._node.device
            a._set(nodes.data(transfer.to_device(c, device), c.dtype, device))
