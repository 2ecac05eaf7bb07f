"""torch-xla: PyTorch on XLA devices through PJRT plugins.

Importing this package checks the torch version. Installed device plugins
are discovered on the first question asked of the plugin registry (unless
XLA_REGISTER_INSTALLED_PLUGINS=0); nothing starts a device until a program
asks for one.
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

__all__ = ["__version__"]
