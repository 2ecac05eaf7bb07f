"""Deprecated names that keep working (PyTorch/XLA's `torch_xla.experimental.deprecation`).

- `deprecated(module, new, old_name=None)`: a function to bind as `module.<old_name>`
  that calls `new`, logging once (a `logging` warning) that the old name is deprecated
  and which to use instead.
- `register_deprecated(module, new)`: binds it as `module.<new's name>`.
- `mark_deprecated(new)`: a decorator; the decorated function logs the same warning on
  its first call and calls `new` instead of its own body.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def _warning_once(old: str, new: Callable) -> Callable[[], None]:
    warned = []

    def warn() -> None:
        if not warned:
            warned.append(True)
            logging.warning(f"{old} is deprecated. Use {new.__module__}.{new.__name__} "
                            "instead.")

    return warn


def _calling(new: Callable, warn: Callable[[], None], like: Callable) -> Any:
    """A function looking like `like` that warns, then calls `new`."""

    @functools.wraps(like)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        warn()
        return new(*args, **kwargs)

    return wrapped


def deprecated(module: Any, new: F, old_name: str | None = None) -> F:
    return _calling(new, _warning_once(f"{module.__name__}.{old_name or new.__name__}", new),
                    new)


def register_deprecated(module: Any, new: Callable) -> None:
    setattr(module, new.__name__, deprecated(module, new))


def mark_deprecated(new: Callable) -> Callable[[F], F]:
    def decorate(func: F) -> F:
        return _calling(new, _warning_once(f"{func.__module__}.{func.__name__}", new), func)

    return decorate
