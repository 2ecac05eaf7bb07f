"""`checkpoint_module`: gradient checkpointing of a module, to apply before FSDP wraps it."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torch_xla.utils.checkpoint import checkpoint


def checkpoint_module(module: nn.Module) -> nn.Module:
    """Make `module`'s forward recompute its activations in backward
    (`torch_xla.utils.checkpoint`) instead of keeping them; returns the same module.

    Apply it before wrapping: `FSDP(checkpoint_module(layer))`. A call without any input
    tensor that requires grad runs the original forward."""
    original = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled() or not any(
                isinstance(v, torch.Tensor) and v.requires_grad
                for v in (*args, *kwargs.values())):
            return original(*args, **kwargs)
        names = list(kwargs)

        def run(*values: Any) -> Any:
            positional = values[:len(values) - len(names)]
            return original(*positional, **dict(zip(names, values[len(positional):],
                                                    strict=True)))

        return checkpoint(run, *args, *kwargs.values(), use_reentrant=True)

    module._xla_checkpointed_forward_original = original
    module.forward = forward
    return module
