"""torch-xla: PyTorch on XLA devices through PJRT plugins.

Importing this package checks the torch version and registers the installed
device plugins (unless XLA_REGISTER_INSTALLED_PLUGINS=0); nothing starts a
device until a program asks for one.
"""

from __future__ import annotations

import os

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

from torch_xla.plugins import registry as _registry  # noqa: E402

if os.environ.get("XLA_REGISTER_INSTALLED_PLUGINS", "1") != "0":
    _registry.register_installed_plugins()

__all__ = ["__version__"]
