"""`torch_xla.core`: the PyTorch/XLA user modules `xla_model` (xm), `functions` and
`xla_env_vars`, reachable as attributes (`torch_xla.core.xla_model`) after a bare
`import torch_xla`, imported on first access."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType


def __getattr__(name: str) -> ModuleType:
    if not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
