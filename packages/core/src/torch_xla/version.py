"""The version of torch-xla-core, and the oldest torch it supports."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

__version__ = "0.1.0"

# The xla device needs the Python PrivateUse1 guard/hooks API of this release.
MIN_TORCH_VERSION = (2, 13)


@functools.cache
def git_revision() -> str | None:
    """The git commit of this package's source, when it runs from a git checkout (an
    editable install); None for an installed wheel, or where git is not installed."""
    try:
        found = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.strip() if found.returncode == 0 else None
