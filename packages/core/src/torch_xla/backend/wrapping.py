"""Replacing a torch function by a wrapper of it, once (registration is idempotent)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def wrap_once(owner: Any, name: str, wrap: Callable[[Callable], Callable],
              marker: str = "torch_xla_wrapped") -> None:
    """Set `owner.name` to `wrap(owner.name)`, marking the wrapper with the attribute
    `marker`; nothing if `owner` has no `name` or it is already a marked wrapper."""
    original = getattr(owner, name, None)
    if original is None or getattr(original, marker, False):
        return
    wrapped = wrap(original)
    setattr(wrapped, marker, True)
    setattr(owner, name, wrapped)
