"""The persistent compilation cache: compiled executables kept on disk across runs.

Entries are written atomically (temporary file, then rename) so a crash never
leaves a half-written entry under a real name; an entry that cannot be read
back is reported once with a warning and recompiled, never fatal.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import warnings
from typing import Any

import jax
from jax.experimental import serialize_executable

from torch_xla import _metrics
from torch_xla._atomic import atomic_write


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    path: str
    readonly: bool


_config: CacheConfig | None = None


def configure(path: str, readonly: bool = False) -> None:
    global _config
    path = os.path.abspath(os.fspath(path))
    if not readonly:
        os.makedirs(path, exist_ok=True)
    elif not os.path.isdir(path):
        raise FileNotFoundError(
            f"Read-only compilation cache {path!r} does not exist. Create it with a "
            "writable run first, or pass readonly=False."
        )
    _config = CacheConfig(path, readonly)


def config() -> CacheConfig | None:
    return _config


def _entry_path(key: str) -> str:
    assert _config is not None
    # The executable depends on the compiler as much as on the graph.
    salt = f"{jax.__version__}|{jax.lib.__version__}|{key}"
    return os.path.join(_config.path, hashlib.sha256(salt.encode()).hexdigest() + ".xla")


def load(key: str) -> Any | None:
    """The cached executable for `key`, or None (missing, unreadable or stale)."""
    if _config is None:
        return None
    path = _entry_path(key)
    try:
        with open(path, "rb") as f:
            payload, in_tree, out_tree = pickle.load(f)
        return serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
    except FileNotFoundError:
        return None
    except Exception as error:  # a corrupt entry must never stop the program
        _metrics.counter("PersistentCacheCorruptEntry").inc()
        warnings.warn(
            f"torch_xla: ignoring unreadable compilation cache entry {path} "
            f"({type(error).__name__}: {error}); recompiling.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def store(key: str, compiled: Any) -> None:
    if _config is None or _config.readonly:
        return
    data = pickle.dumps(serialize_executable.serialize(compiled))
    atomic_write(_entry_path(key), data)
