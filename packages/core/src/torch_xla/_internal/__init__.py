"""PyTorch/XLA's private helpers that its tests and some tools import (`torch_xla._internal`).

Device-specific helpers (PyTorch/XLA's `torch_xla._internal.<device>`) are not part of
this core: the device's plugin package provides them (see `torch_xla.plugins.modules`),
and they are imported here on first access, e.g. `from torch_xla._internal import mychip`.
Asking for a name that is neither a module here nor declared by a plugin raises
ImportError (also from `hasattr`), naming the package to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

from torch_xla.plugins.modules import load_internal_module


def __getattr__(name: str) -> types.ModuleType:
    if name.startswith("__"):  # dunder lookups (copy, pickle, inspect) are not modules
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # ours, not imported yet
        return importlib.import_module(f"{__name__}.{name}")
    module = load_internal_module(__name__, name)
    # Later `import torch_xla._internal.<name>` and attribute lookups find it directly.
    sys.modules[f"{__name__}.{name}"] = module
    setattr(sys.modules[__name__], name, module)
    return module
