"""Custom calls recorded on XLA tensors (PyTorch/XLA's `_xla_custom_call`, behind
`torch_xla.experimental.stablehlo_custom_call`).

A custom call is one node of the graph, lowered to `stablehlo.custom_call` by
`lowering/custom_call.py`: the program calls a kernel its device's compiler knows by
name. Its outputs are new tensors of the shapes and dtypes the caller declares; nothing
checks them against the kernel, which writes what it writes. No gradient flows through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from torch_xla.lazy import dtype_policy, functional, nodes
from torch_xla.lazy.tensor import common_device, device_index
from torch_xla.lowering import custom_call as lowering

OP = "xla::custom_call"

def record(args: Sequence[torch.Tensor], call_target: str, output_shapes: Sequence[Any],
           output_dtypes: Sequence[torch.dtype], has_side_effect: bool = False,
           backend_config: str = "", api_version: int = 0,
           frontend_attributes: Mapping[str, str] | None = None) -> list[torch.Tensor]:
    """The outputs of custom call `call_target` on the XLA tensors `args`, one per
    (shape, dtype) of `output_shapes` and `output_dtypes`."""
    what = "_xla_custom_call"
    if not isinstance(call_target, str) or not call_target:
        raise ValueError(f"{what}: call_target must be the non-empty name of a kernel the "
                         f"device's compiler knows, got {call_target!r}")
    results = _results(what, output_shapes, output_dtypes)
    if not isinstance(backend_config, (str, bytes)):
        raise TypeError(f"{what}: backend_config must be a string (handed to the kernel as "
                        f"is), got {type(backend_config).__name__}")
    if isinstance(backend_config, bytes):
        backend_config = backend_config.decode()
    if api_version not in lowering.API_VERSIONS:
        raise ValueError(f"{what}: api_version must be one of XLA's custom-call API "
                         f"versions {lowering.API_VERSIONS}, got {api_version!r}")
    attributes = dict(frontend_attributes or {})
    for name, value in attributes.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"{what}: frontend_attributes map strings to strings, got "
                            f"{name!r}: {value!r}")
    static = {"target": call_target, "results": results,
              "has_side_effect": bool(has_side_effect), "backend_config": backend_config,
              "api_version": int(api_version),
              "frontend_attributes": tuple(sorted(attributes.items()))}
    return _recorded(what, args, static, output_shapes, output_dtypes)


def fx_node_outputs(n: torch.fx.Node) -> tuple[list, list]:
    """The output shapes and dtypes of FX node `n`, from its `val` metadata (a tensor, or
    a sequence of tensors), as `record` takes them."""
    if "val" not in n.meta:
        raise ValueError(f"node {n.name} has no 'val' metadata: trace it with fake tensors "
                         "(torch.export or make_fx) first")
    value = n.meta["val"]
    if isinstance(value, torch.Tensor):
        return [value.shape], [value.dtype]
    if not all(isinstance(v, torch.Tensor) for v in value):
        raise ValueError(f"node {n.name} has outputs that are not tensors: {value!r}")
    return [v.shape for v in value], [v.dtype for v in value]


def _results(what: str, output_shapes: Sequence[Any], output_dtypes: Sequence[Any]
             ) -> tuple:
    """((shape, storage dtype), ...) of the declared outputs."""
    shapes, dtypes = list(output_shapes), list(output_dtypes)
    if len(shapes) != len(dtypes):
        raise ValueError(f"{what}: {len(shapes)} output shapes but {len(dtypes)} output "
                         "dtypes: give one dtype per output")
    if not shapes:
        raise ValueError(f"{what}: a custom call needs at least one output: a lazy graph "
                         "runs only what its outputs need, so one without outputs would "
                         "never run")
    results = []
    for shape, dtype in zip(shapes, dtypes, strict=True):
        if not isinstance(dtype, torch.dtype) or dtype not in dtype_policy.STORAGE:
            raise TypeError(f"{what}: output dtypes must be torch dtypes an XLA tensor can "
                            f"hold, got {dtype!r}")
        try:
            dims = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise TypeError(f"{what}: each output shape must be a sequence of ints, got "
                            f"{shape!r}") from None
        if any(d < 0 for d in dims):
            raise ValueError(f"{what}: output shape {dims} has a negative size")
        results.append((dims, dtype_policy.STORAGE[dtype]))
    return tuple(results)


def _recorded(what: str, args: Sequence[torch.Tensor], static: dict,
              output_shapes: Sequence[Any], output_dtypes: Sequence[torch.dtype]
              ) -> list[torch.Tensor]:
    tensors = list(args)
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}: args must be XLA tensors, got {type(t).__name__}")
    found = common_device(tensors)
    device = device_index(None) if found is None else found
    inner = [functional.unwrap(t) for t in tensors]
    avals = [(shape, dtype) for (shape, _), dtype in
             zip(static["results"], output_dtypes, strict=True)]
    outs = nodes.custom(lowering.call, OP, inner, static, avals, device=device)
    return [functional.wrap(t) for t in outs]
