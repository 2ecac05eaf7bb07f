"""Where libtpu's PJRT C API library is."""

from __future__ import annotations

import os
import warnings

from torch_xla.plugins import PluginError, env_text

LIBRARY_ENV = "TPU_LIBRARY_PATH"


def find_library() -> str:
    """`TPU_LIBRARY_PATH` when it names an existing file, else the libtpu package's library."""
    override = env_text(LIBRARY_ENV)
    if override and os.path.isfile(override):
        return override
    if override:
        warnings.warn(
            f"{LIBRARY_ENV}={override!r} is not a file; using the libtpu package's library "
            f"instead. Unset {LIBRARY_ENV} or point it at libtpu.so.",
            RuntimeWarning,
            stacklevel=2,
        )
    path = _packaged_library(override)
    if not os.path.isfile(path):
        raise PluginError(
            f"libtpu reports its library at {path!r}, which does not exist. "
            "Reinstall it with `pip install --force-reinstall libtpu`."
        )
    return path


def _packaged_library(override: str | None) -> str:
    try:
        import libtpu  # imported late: it edits os.environ when imported
    except ImportError as error:
        tried = f"{LIBRARY_ENV}={override!r} is not a file and " if override else ""
        raise PluginError(
            f"The TPU plugin needs libtpu.so: {tried}the libtpu package is not installed "
            f"({error}). Run `pip install libtpu`, or set {LIBRARY_ENV} to the library's path."
        ) from error
    return libtpu.get_library_path()
