"""torch-xla: PyTorch on XLA devices through PJRT plugins.

Importing this package checks the torch version and makes the `xla` device
known to torch. Installed device plugins are discovered on the first question
asked of the plugin registry (unless XLA_REGISTER_INSTALLED_PLUGINS=0);
nothing starts a device until a program asks for one.
"""

from __future__ import annotations

import torch

from torch_xla.version import MIN_TORCH_VERSION, __version__


def _torch_version(text: str) -> tuple[int, int]:
    major, minor = text.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def check_torch_version(text: str = torch.__version__) -> None:
    if _torch_version(text) < MIN_TORCH_VERSION:
        wanted = ".".join(map(str, MIN_TORCH_VERSION))
        raise ImportError(
            f"torch_xla needs torch>={wanted} for its xla device, found torch {text}. "
            f"Upgrade with `pip install 'torch>={wanted}'`."
        )


check_torch_version()

from torch_xla import _XLAC  # noqa: E402, F401 - torch_xla._XLAC, as PyTorch/XLA has it
from torch_xla import backend as _backend  # noqa: E402

_backend.register()  # torch.device("xla", n) works from here on; no device is started


def device(index: int | None = None) -> torch.device:
    """The XLA device `xla:index` (xla:0 by default)."""
    from torch_xla.core import xla_model

    return xla_model.xla_device(index)


def sync() -> None:
    """Run every pending XLA computation (the same as `xm.mark_step()`)."""
    from torch_xla.core import xla_model

    xla_model.mark_step()


__all__ = ["__version__", "device", "sync"]
