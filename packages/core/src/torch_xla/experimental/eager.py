"""Eager mode, as PyTorch/XLA's `torch_xla.experimental` offers it.

In eager mode every op compiles (once per op and shapes) and runs as soon as it is
called, instead of waiting for a sync; `torch_xla.compile` still traces its function
lazily into one graph. The switch is process-wide.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch_xla import _XLAC

__all__ = ["eager_mode", "eager_mode_context", "is_eager_mode"]


def eager_mode(enable: bool) -> None:
    """Turn eager mode on or off (tensors pending so far stay pending until a sync)."""
    _XLAC._set_use_eager_mode(enable)


def is_eager_mode() -> bool:
    return _XLAC._get_use_eager_mode()


@contextlib.contextmanager
def eager_mode_context(enable: bool) -> Iterator[bool]:
    """Eager mode on (or off) inside the block; yields the mode it replaced, restored on exit."""
    saved = is_eager_mode()
    eager_mode(enable)
    try:
        yield saved
    finally:
        eager_mode(saved)
