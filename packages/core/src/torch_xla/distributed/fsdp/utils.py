"""Module transforms to apply before FSDP wraps a model: `checkpoint_module` (gradient
checkpointing) and `apply_xla_patch_to_nn_linear` (linear layers as einsums)."""

from __future__ import annotations

from collections.abc import Callable
from types import MethodType
from typing import Any

import torch
from torch import nn

from torch_xla.distributed.spmd.xla_sharding import xla_patched_nn_linear_forward
from torch_xla.utils.checkpoint import checkpoint


def checkpoint_module(module: nn.Module) -> nn.Module:
    """Make `module`'s forward recompute its activations in backward
    (`torch_xla.utils.checkpoint`) instead of keeping them; returns the same module.

    Apply it before wrapping: `FSDP(checkpoint_module(layer))`. A call without any input
    tensor that requires grad runs the original forward."""
    def forward(*args: Any, **kwargs: Any) -> Any:
        original = module._xla_checkpointed_forward_original  # patchable, as upstream's
        if not torch.is_grad_enabled() or not any(
                isinstance(v, torch.Tensor) and v.requires_grad
                for v in (*args, *kwargs.values())):
            return original(*args, **kwargs)
        names = list(kwargs)

        def run(_module: nn.Module, *values: Any) -> Any:
            positional = values[:len(values) - len(names)]
            return original(*positional, **dict(zip(names, values[len(positional):],
                                                    strict=True)))

        # a method of the module: the recomputation reads its parameters and buffers
        # through the checkpoint's optimization barrier too
        return checkpoint(MethodType(run, module), *args, *kwargs.values(),
                          use_reentrant=True)

    module._xla_checkpointed_forward_original = module.forward
    module.forward = forward
    return module


def apply_xla_patch_to_nn_linear(
        module: nn.Module,
        patched_function: Callable[[nn.Linear, torch.Tensor], torch.Tensor] = (
            xla_patched_nn_linear_forward)) -> nn.Module:
    """Make every `nn.Linear` in `module` (itself included) compute its forward with
    `patched_function(layer, input)`, by default as einsums
    (`torch_xla.distributed.spmd.xla_patched_nn_linear_forward`), whose contraction XLA
    sees directly (PyTorch/XLA does this to FSDP's flattened linear layers). A layer whose
    forward is no longer `nn.Linear.forward` is left alone; one wrapped by
    `checkpoint_module` gets the patch inside the checkpoint. Returns `module`; the
    original forward stays as `layer._nn_linear_forward_original`."""

    def patch(layer: nn.Linear, attribute: str) -> None:
        forward = getattr(layer, attribute, None)
        if getattr(forward, "__func__", None) is not nn.Linear.forward:
            return
        layer._nn_linear_forward_original = forward
        setattr(layer, attribute, MethodType(patched_function, layer))

    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            patch(layer, "forward")
            patch(layer, "_xla_checkpointed_forward_original")
    return module
