"""Modules that plugin packages provide under torch_xla's own names.

PyTorch/XLA keeps vendor helpers inside its core (`torch_xla._internal.<vendor>`);
here the vendor's package ships them and declares each under the entry-point group
``torch_xla.internal_modules``, its name mapped to the module::

    [project.entry-points."torch_xla.internal_modules"]
    mychip = "torch_xla_mychip.internal"

`torch_xla._internal.mychip` then finds it on first access. A name nobody declares
raises an ImportError that names the package to install.
"""

from __future__ import annotations

import types

from torch_xla.plugins.registry import _declared_entry_points

INTERNAL_MODULES_GROUP = "torch_xla.internal_modules"


def declared_internal_modules(path: list[str] | None = None) -> dict[str, str]:
    """`{name: "module"}` of every internal module declared by installed packages."""
    return {ep.name: ep.value for ep in _declared_entry_points(path, INTERNAL_MODULES_GROUP)}


def load_internal_module(owner: str, name: str,
                         path: list[str] | None = None) -> types.ModuleType:
    """Import the module a plugin declares as `owner.name` (`owner` is the asking package).

    Raises ImportError naming the plugin package to install when no package declares it,
    or carrying the cause when the declared module fails to import.
    """
    found = [ep for ep in _declared_entry_points(path, INTERNAL_MODULES_GROUP)
             if ep.name == name]
    if not found:
        raise ImportError(
            f"{owner}.{name} is provided by a plugin package, and none that is installed "
            f"declares it (entry-point group {INTERNAL_MODULES_GROUP!r}). Install the plugin "
            f"for that device, e.g. `pip install torch-xla-{name}`.",
            name=f"{owner}.{name}",
        )
    entry_point = found[0]
    try:
        module = entry_point.load()
    except Exception as error:
        raise ImportError(
            f"{owner}.{name} is declared by {_origin(entry_point)} as {entry_point.value!r}, "
            f"which failed to import: {type(error).__name__}: {error}. Reinstall that package "
            "or uninstall it.",
            name=f"{owner}.{name}",
        ) from error
    if not isinstance(module, types.ModuleType):
        raise ImportError(
            f"{_origin(entry_point)} declares {owner}.{name} as {entry_point.value!r}, which "
            f"is a {type(module).__name__}, not a module; the entry point must name a module.",
            name=f"{owner}.{name}",
        )
    return module


def _origin(entry_point) -> str:
    dist = entry_point.dist
    return f"{dist.name} {dist.version}" if dist else "an installed package"
