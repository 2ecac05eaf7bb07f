"""torch decompositions that disagree with torch's own CPU kernels, and ours in their
place; shared by the engine (`lowering/decompositions.py`, which records ours instead of
torch's) and the xla device (`backend/`, which gives ours to the graphs AOTAutograd traces
for `torch.compile` on the device).

torch registers some decompositions as the op's Python kernel for the Autograd key, which
AOTAutograd's tracing runs; `install()` puts ours there for calls on xla tensors and leaves
every other device with torch's.

Each entry of `CORRECTED` carries what torch's decomposition gets wrong.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._C import DispatchKey
from torch._ops import OpOverload

aten = torch.ops.aten
CORRECTED: dict[OpOverload, tuple[Callable, str]] = {}


def _corrects(op: OpOverload, why: str) -> Callable[[Callable], Callable]:
    def decorate(fn: Callable) -> Callable:
        CORRECTED[op] = (fn, why)
        return fn

    return decorate


@_corrects(aten.multilabel_margin_loss_forward.default,
           "torch's decomposition counts the padding after a row's first -1 as targets of "
           "the loss (its is_target output ignores them, as the CPU kernel does), so any "
           "-1-padded target gives a wrong loss; and it returns a (1,) loss for an input "
           "of at most one dimension without reduction, where the CPU kernel returns a "
           "0-dim one")
def multilabel_margin_loss_forward(x, target, reduction):
    """Each listed target t and non-target j add max(0, 1 - (x[t] - x[j])) / C to the
    row's loss; the target list ends at the first -1."""
    classes = x.shape[-1] if x.dim() else 1
    rows, labels = x.reshape(-1, classes), target.reshape(-1, classes)
    listed = (labels >= 0).to(torch.int64).cumprod(1).bool()
    safe = labels.masked_fill(~listed, 0)
    is_target = torch.zeros_like(rows).scatter_add(1, safe, listed.to(x.dtype)) > 0
    z = (1 - rows.gather(1, safe).unsqueeze(2) + rows.unsqueeze(1)).clamp_min(0)
    counted = listed.unsqueeze(2) & ~is_target.unsqueeze(1)
    loss = torch.where(counted, z, 0).sum((1, 2)) / classes
    if reduction == 1:
        loss = loss.mean()
    elif reduction == 2:
        loss = loss.sum()
    elif x.dim() <= 1:
        loss = loss.reshape(())
    return loss, is_target.to(x.dtype).reshape(target.shape)


def _on_device(device_type: str, ours: Callable, torchs: Callable) -> Callable:
    def kernel(*args, **kwargs):
        on = any(isinstance(a, torch.Tensor) and a.device.type == device_type for a in args)
        return (ours if on else torchs)(*args, **kwargs)

    kernel.__qualname__ = ours.__qualname__
    return kernel


def install(device_type: str) -> None:
    """Make ours the Python Autograd kernel of each corrected op that torch gives one, for
    calls with a tensor on `device_type` (idempotent)."""
    for op, (ours, _) in CORRECTED.items():
        torchs = op.py_kernels.get(DispatchKey.Autograd)
        if torchs is None or getattr(torchs, "__wrapped_ours__", None) is ours:
            continue
        kernel = _on_device(device_type, ours, torchs)
        kernel.__wrapped_ours__ = ours
        op.py_kernels[DispatchKey.Autograd] = kernel
        op._dispatch_cache.clear()
