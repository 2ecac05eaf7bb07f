"""`prime_optimizer`: create an optimizer's state so a checkpoint can be loaded into it."""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_map

import torch_xla
from torch_xla.core import xla_model as xm
from torch_xla.lazy import functional, sharding


def prime_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Run one `optimizer.step()` with zero gradients, laid out as their parameters, so
    its state (momentum, Adam moments) exists: checkpoints load in place, into state
    that is already there. The step may still change the parameters and the state
    (weight decay, step counts): call it only right before restoring a checkpoint."""
    _sync()  # every parameter is device data, its layout known
    tree_map(_zero_grad, optimizer.param_groups)
    optimizer.step()
    _sync()
    return optimizer


def _zero_grad(x: object) -> None:
    if isinstance(x, torch.Tensor) and x.requires_grad:
        x.grad = torch.zeros_like(x, requires_grad=False)
        layout = sharding.layout(functional.unwrap(x)) if x.device.type == "xla" else None
        if layout is not None:
            sharding.mark(x.grad, layout)


def _sync() -> None:
    torch_xla.sync()
    xm.wait_device_ops()
