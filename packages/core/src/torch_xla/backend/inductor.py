"""`torch.compile`'s default backend, inductor, on the xla device: a clear error.

Inductor generates C++ or Triton kernels for the devices it knows; for an xla tensor it
failed deep in its code generation with `KeyError: 'xla'`. PyTorch/XLA does not support
it either: XLA devices compile through `torch.compile(model, backend='openxla')`.
Importing inductor takes seconds, so nothing is imported here: an import hook wraps
`torch._inductor.compile_fx.compile_fx` (what the default backend calls) when torch
imports it, and the wrapper refuses graphs whose inputs are on the xla device.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
from typing import Any

import torch

from torch_xla.backend.wrapping import wrap_once

MODULE = "torch._inductor.compile_fx"
MESSAGE = (
    "torch.compile's default backend (inductor) cannot compile for the xla device. "
    "Compile with XLA instead: torch.compile(model, backend='openxla') (training and "
    "inference), or backend='openxla_eval' (inference)."
)


def refuse_xla(compile_fx):
    """`compile_fx` refusing graphs with xla inputs (others compile as before)."""

    @functools.wraps(compile_fx)
    def guarded(model, example_inputs, *args: Any, **kwargs: Any):
        if any(isinstance(t, torch.Tensor) and t.device.type == "xla"
               for t in example_inputs):
            raise RuntimeError(MESSAGE)
        return compile_fx(model, example_inputs, *args, **kwargs)

    return guarded


def _guard(module) -> None:
    wrap_once(module, "compile_fx", refuse_xla, marker="refuses_xla")


class _WhenImported(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `MODULE` is imported, has its loader run `_guard` on it."""

    def find_spec(self, fullname: str, path: Any, target: Any = None):
        if fullname != MODULE:
            return None
        sys.meta_path.remove(self)  # once; the other finders locate the module
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module) -> None:
                run(module)
                _guard(module)

            spec.loader.exec_module = exec_module
        return spec


def register() -> None:
    """Guard inductor now if torch imported it already, else when torch imports it."""
    if MODULE in sys.modules:
        _guard(sys.modules[MODULE])
    elif not any(isinstance(f, _WhenImported) for f in sys.meta_path):
        sys.meta_path.insert(0, _WhenImported())
