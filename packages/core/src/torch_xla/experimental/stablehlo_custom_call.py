"""XLA custom calls from PyTorch (PyTorch/XLA's `torch_xla.experimental.stablehlo_custom_call`).

    y = stablehlo_custom_call([x], "my_kernel", [x.shape], [x.dtype],
                              backend_config="...", api_version=3)

records one `stablehlo.custom_call @my_kernel` in the graph: the program calls a kernel
the device's compiler knows by that name (one a vendor registered with XLA, e.g.
through `jax.ffi.register_ffi_target`). The outputs are new XLA tensors of the shapes
and dtypes given; `api_version` is XLA's custom-call API the kernel was written against
(0, the default, as 1: the original), `backend_config` is handed to the kernel as is,
and `frontend_attributes` become the op's XLA frontend attributes. A name no kernel is
registered under fails when the program compiles. No gradient flows through the call.

`place_to_host(t)` and `place_to_device(t)` annotate a value's placement (XLA's
`annotate_device_placement`): XLA moves it to pinned host memory and back, which
host-offloading programs use to free device memory between forward and backward.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

import torch_xla
from torch_xla.lazy.custom_call import fx_node_outputs as extract_custom_call_outputs_shape_dtype

__all__ = ["extract_custom_call_outputs_shape_dtype", "place_to_device", "place_to_host",
           "stablehlo_custom_call"]


def stablehlo_custom_call(args: Sequence[torch.Tensor], call_target: str,
                          output_shapes: Sequence[Any], output_dtypes: Sequence[torch.dtype],
                          has_side_effect: bool = False, backend_config: str = "",
                          api_version: int = 0,
                          frontend_attributes: Mapping[str, str] | None = None) -> Any:
    """The output of custom call `call_target` on `args` (a list of them when there are
    several outputs)."""
    results = torch_xla._XLAC._xla_custom_call(list(args), call_target, output_shapes,
                                               output_dtypes, has_side_effect,
                                               backend_config, api_version,
                                               frontend_attributes or {})
    return results[0] if len(output_shapes) == 1 else results


def _placed(a: torch.Tensor, memory: str) -> torch.Tensor:
    return stablehlo_custom_call([a], "annotate_device_placement", [a.shape], [a.dtype],
                                 has_side_effect=True,
                                 frontend_attributes={"_xla_buffer_placement": memory})


def place_to_host(a: torch.Tensor) -> torch.Tensor:
    """`a`, placed in the device's pinned host memory."""
    return _placed(a, "pinned_host")


def place_to_device(a: torch.Tensor) -> torch.Tensor:
    """`a`, placed back in device memory."""
    return _placed(a, "device")
