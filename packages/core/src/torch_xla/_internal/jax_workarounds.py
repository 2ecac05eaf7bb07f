"""Using jax beside torch_xla (PyTorch/XLA's `torch_xla._internal.jax_workarounds`).

PyTorch/XLA owns its device through a C++ runtime client and loads jax as a second
client, so it must take the device before jax does and keep jax's client from joining
a multi-slice job. Here jax's client *is* torch_xla's runtime: there is one client, and
what jax code needs is that this client has started, configured by the active plugin
(its platform, `jax_enable_x64`, the distributed job), before the code makes jax choose
its backends. Nothing here imports jax when this module is imported.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import types
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["jax_env_context", "jax_import_guard", "maybe_get_torchax", "requires_jax"]

# What `maybe_get_torchax` imports: the package and the parts PyTorch/XLA's callers use.
_TORCHAX_MODULES = ("torchax", "torchax.tensor", "torchax.interop", "torchax.ops.mappings")


def jax_import_guard() -> None:
    """Start torch_xla's runtime client (jax's, set up by the active plugin), so that jax
    code run afterwards uses the device torch_xla uses. Raises ImportError if jax is not
    installed."""
    from torch_xla.pjrt.client import client

    client()


def requires_jax(func: Callable) -> Callable:
    """`func`, run after `jax_import_guard()`: for functions that use jax."""

    @functools.wraps(func)
    def with_jax(*args: Any, **kwargs: Any) -> Any:
        try:
            jax_import_guard()
        except ImportError as error:
            raise ImportError(
                f"{getattr(func, '__qualname__', func)} uses jax, and torch_xla's runtime "
                f"could not start because an import failed ({error}). Install jax, or the "
                "plugin package of the device PJRT_DEVICE names."
            ) from error
        with jax_env_context():
            return func(*args, **kwargs)

    return with_jax


@contextlib.contextmanager
def jax_env_context() -> Iterator[None]:
    """The environment jax code runs in; here it changes nothing. PyTorch/XLA sets
    SKIP_MEGASCALE_PJRT_CLIENT inside it so that jax's second client stays out of a
    multi-slice job; here jax's client is torch_xla's own, which must not skip it."""
    yield


def maybe_get_torchax() -> types.ModuleType | None:
    """The `torchax` package (with its tensor, interop and op-mapping modules imported),
    after starting torch_xla's runtime; None when torchax is not installed. A torchax that
    is installed but fails to import raises its error."""
    if importlib.util.find_spec("torchax") is None:
        return None
    jax_import_guard()
    with jax_env_context():
        modules = [importlib.import_module(name) for name in _TORCHAX_MODULES]
    return modules[0]
