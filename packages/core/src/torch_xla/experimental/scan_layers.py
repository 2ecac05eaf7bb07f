"""`scan_layers`: a stack of like layers run as one XLA While loop, as PyTorch/XLA's
`torch_xla.experimental.scan_layers`.

    hidden = scan_layers(decoder.layers, hidden)   # == nn.Sequential(*decoder.layers)(hidden)

The layers' parameters and buffers are stacked along a new leading dimension and
`scan` runs the first layer's computation over them with `torch.func.functional_call`,
so the program holds one layer, not one per layer, and gradients reach every layer's
parameters through the stacking. The layers must be alike: the same parameter and
buffer names and shapes, and the same computation given those.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from functorch.compile import default_partition
from torch import nn
from torch.utils._pytree import tree_map

from torch_xla.experimental.scan import scan

__all__ = ["scan_layers"]

# (partition_fn, first layer) -> the step of a pure layer, kept so that `scan` finds the
# traced graphs of the same step again
_STEPS: dict[tuple[int, int], Callable] = {}


def scan_layers(layers: Iterable[nn.Module], input_data: Any,
                partition_fn: Callable = default_partition,
                is_layer_pure: bool = False) -> Any:
    """Apply `layers` one after the other to `input_data` (each layer's output is the next
    one's input) in one XLA While loop; returns the last layer's output.

    `input_data` may be a tensor or a tuple of tensors (passed to a layer as separate
    arguments, and returned by it as a tuple). `partition_fn` chooses what the backward
    recomputes (see `scan`). `is_layer_pure`: the layers depend only on their
    parameters, buffers and input, so the traced step of this first layer is kept and
    reused by later calls."""
    layers = list(layers)
    if not layers:
        return input_data
    params = [dict(layer.named_parameters()) for layer in layers]
    buffers = [dict(layer.named_buffers()) for layer in layers]
    _check_alike(params, "parameter")
    _check_alike(buffers, "buffer")
    stacked = (_stacked(params), _stacked(buffers))
    step = _step(layers[0], partition_fn, is_layer_pure)
    carry, _ = scan(step, input_data, stacked, partition_fn=partition_fn,
                    is_fn_pure=is_layer_pure)
    return carry


def _stacked(dicts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return tree_map(lambda *tensors: torch.stack(tensors), *dicts)


def _step(first: nn.Module, partition_fn: Callable, pure: bool) -> Callable:
    key = (id(partition_fn), id(first))
    if pure and key in _STEPS:
        return _STEPS[key]
    template = copy.deepcopy(first)  # its own tensors are never read: functional_call swaps

    def one_layer(carry: Any, params_and_buffers: tuple[dict, dict]) -> tuple[Any, None]:
        args = carry if isinstance(carry, tuple) else (carry,)
        merged = {**params_and_buffers[0], **params_and_buffers[1]}
        return torch.func.functional_call(template, merged, args, strict=True), None

    if pure:
        _STEPS[key] = one_layer
    return one_layer


def _check_alike(dicts: Sequence[Mapping[str, torch.Tensor]], kind: str) -> None:
    """Every layer has the first one's names and shapes, else a ValueError naming the
    layer and the difference."""
    first = dicts[0]
    for index, current in enumerate(dicts[1:], start=1):
        missing, extra = first.keys() - current.keys(), current.keys() - first.keys()
        if missing or extra:
            raise ValueError(
                f"scan_layers: layer {index} has mismatched keys ({kind}s) with layer 0: "
                f"missing {sorted(missing)}, extra {sorted(extra)}. All layers must have the "
                "same structure.")
        for name, tensor in first.items():
            if current[name].shape != tensor.shape:
                raise ValueError(
                    f"scan_layers: Shape mismatch for {kind} '{name}' in layer {index}: "
                    f"expected {tuple(tensor.shape)} (layer 0), got "
                    f"{tuple(current[name].shape)}. All layers must have the same shapes.")
