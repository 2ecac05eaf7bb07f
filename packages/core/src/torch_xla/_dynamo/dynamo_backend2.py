"""A second `torch.compile` backend: AOTAutograd's `aot_function` around the dynamo bridge.

PyTorch/XLA's `dynamo_backend2` lowers the FX graph through torchax; here both backends
share one engine, so this one differs from `openxla` only in how AOTAutograd is entered
(`aot_function` on the graph as a plain function, instead of dynamo's `aot_autograd`).
Use it as `torch.compile(fn, backend=dynamo_backend2.dynamo_backend)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from functorch.compile import aot_function, make_boxed_func

from torch_xla._dynamo import dynamo_bridge


def _compile_on_first_call(gm: torch.fx.GraphModule, example_args: Sequence[Any]) -> Callable:
    """AOTAutograd hands over fake example tensors: compile with the real ones."""
    compiled = None

    def run(*args: Any) -> Any:
        nonlocal compiled
        if compiled is None:
            compiled = dynamo_bridge.extract_compiled_graph(gm, args)
        return compiled(*args)

    return make_boxed_func(run)


def dynamo_backend(fx: torch.fx.GraphModule, args: Sequence[Any]) -> Callable:
    """The backend: `fx` (dynamo's graph) with forward and backward compiled by the bridge."""
    return aot_function(fx, fw_compiler=_compile_on_first_call)
