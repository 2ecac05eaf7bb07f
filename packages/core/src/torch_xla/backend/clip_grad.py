"""`torch.nn.utils.clip_grad_norm_` on XLA parameters that have no gradient.

torch returns `torch.tensor(0.)` on the CPU when no parameter has a gradient, so a
training step that logs the norm would mix devices (or read a CPU value where every
other step gives an XLA tensor). PyTorch/XLA patches the function to return the zero on
the XLA device; `register` wraps torch's function to do that when the parameters are
XLA tensors, and calls torch's unchanged otherwise.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.utils import clip_grad


def _no_grad_norm_on_device(original: Callable) -> Callable:
    @functools.wraps(original)
    def clip_grad_norm_(parameters: Any, max_norm: float, norm_type: float = 2.0,
                        error_if_nonfinite: bool = False, foreach: bool | None = None
                        ) -> torch.Tensor:
        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        if all(p.grad is None for p in params):
            xla = next((p for p in params if p.device.type == "xla"), None)
            if xla is not None:
                return torch.zeros((), device=xla.device)
        return original(params, max_norm, norm_type, error_if_nonfinite=error_if_nonfinite,
                        foreach=foreach)

    clip_grad_norm_.__wrapped_for_xla__ = True
    return clip_grad_norm_


def register() -> None:
    """Wrap torch's `clip_grad_norm_` where user code finds it (idempotent)."""
    original = clip_grad.clip_grad_norm_
    if getattr(original, "__wrapped_for_xla__", False):
        return
    wrapped = _no_grad_norm_on_device(original)
    clip_grad.clip_grad_norm_ = wrapped
    torch.nn.utils.clip_grad_norm_ = wrapped
