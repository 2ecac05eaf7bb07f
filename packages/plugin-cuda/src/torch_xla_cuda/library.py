"""Where the CUDA PJRT C API library is."""

from __future__ import annotations

import importlib.util
import os
import sys
import types

from torch_xla.plugins import PluginError, env_file

LIBRARY_ENV = "GPU_LIBRARY_PATH"  # PyTorch/XLA's name for the override
LIBRARY_FILE = "xla_cuda_plugin.so"

# jax's PJRT packages, newest CUDA first: (module that ships the library, our pip extra).
PJRT_PACKAGES = (
    ("jax_plugins.xla_cuda13", "cuda13"),
    ("jax_plugins.xla_cuda12", "cuda12"),
)


def find_library() -> str:
    """`GPU_LIBRARY_PATH` if set, else the library of an installed jax-cuda1x-pjrt."""
    override = env_file(
        LIBRARY_ENV,
        expected=LIBRARY_FILE,
        fallback="the installed jax-cuda12-pjrt/jax-cuda13-pjrt",
    )
    if override:
        return override
    for module, extra in PJRT_PACKAGES:
        directory = package_directory(module)
        if directory is None:
            continue
        path = os.path.join(directory, LIBRARY_FILE)
        if not os.path.isfile(path):
            raise PluginError(
                f"{module} is installed at {directory} but has no {LIBRARY_FILE}. "
                f"Reinstall it, e.g. `pip install --force-reinstall 'torch-xla-cuda[{extra}]'`."
            )
        return path
    raise PluginError(
        "The CUDA plugin found no PJRT library: neither jax-cuda12-pjrt nor jax-cuda13-pjrt "
        "is installed. Run `pip install 'torch-xla-cuda[cuda12]'` (CUDA 12 driver) or "
        f"`pip install 'torch-xla-cuda[cuda13]'` (CUDA 13 driver), or set {LIBRARY_ENV} "
        f"to the path of {LIBRARY_FILE}."
    )


def package_directory(module: str) -> str | None:
    """The directory of an installed package, found without importing it.

    Importing jax_plugins.xla_cuda1x would load the CUDA libraries.
    """
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:  # the jax_plugins namespace itself is absent
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def keep_jax_from_registering_it() -> None:
    """Stop jax's own plugin discovery from registering "cuda" a second time.

    At its first backend query jax imports every installed `jax_plugins.*` package and
    calls its `initialize()`, which registers the same library under "cuda" again: an
    ALREADY_EXISTS error logged as a "Jax plugin configuration error" (or, where its CUDA
    version check runs first, a failed check) in every CUDA process. The core registers
    the library itself (with our client options), so each installed package is stood in
    for by a module whose `initialize()` does nothing; jax finds it already imported.
    Call this before the client exists; other platforms never call it.
    """
    for module, _ in PJRT_PACKAGES:
        if module in sys.modules or package_directory(module) is None:
            continue
        stand_in = types.ModuleType(module, "Registered by torch_xla_cuda, not by jax.")
        stand_in.__spec__ = importlib.util.find_spec(module)  # still found where installed
        stand_in.__path__ = list(stand_in.__spec__.submodule_search_locations)
        stand_in.initialize = _registered_by_torch_xla
        sys.modules[module] = stand_in


def _registered_by_torch_xla() -> None:
    """jax's plugin hook: nothing to do, the core registered the library as "cuda"."""
