"""The persistent compilation cache: compiled executables kept on disk across runs.

An entry is one file, `<sha256 of the salted key>.xla`:

    magic (8 bytes) | SHA-256 of the rest (32) | key length (4, little-endian) | key | payload

The key is stored whole and the checksum covers it and the payload, so an
entry is verified (checksum first, then key) before a byte of its payload
reaches the deserializer: a damaged executable handed to XLA can crash the
process or compute wrong numbers without a word. A bad entry is one warning
and a recompilation, whose result is written over it.

Entries are written atomically (temporary file, then rename) so a crash never
leaves a half-written entry under a real name. A folder that cannot be written
(missing, read-only, full) is one warning for the process, which then runs on
without writing the cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import re
import struct
import threading
import warnings
from typing import Any

import jax
from jax.experimental import serialize_executable

from torch_xla import _metrics
from torch_xla._atomic import atomic_write

MAGIC = b"TXLACC\x00\x01"  # the last byte is the layout version
HEADER = struct.Struct("<8s32sI")  # magic, SHA-256 of everything after it, key length


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    path: str
    readonly: bool  # also set once a write fails: the rest of the run only reads


_config: CacheConfig | None = None
_lock = threading.Lock()


class BadEntry(Exception):
    """An entry that fails verification; the message says how."""


def configure(path: str, readonly: bool = False) -> None:
    global _config
    path = os.path.abspath(os.fspath(path))
    if readonly and not os.path.isdir(path):
        raise FileNotFoundError(
            f"Read-only compilation cache {path!r} does not exist. Create it with a "
            "writable run first, or pass readonly=False."
        )
    _config = None
    if not readonly:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as error:
            _warn(f"cannot create the compilation cache folder {path} ({_reason(error)}); "
                  "running without the persistent cache. Pass initialize_cache() a folder "
                  "that can be created and written.", stacklevel=4)
            return
    _config = CacheConfig(path, readonly)


def config() -> CacheConfig | None:
    return _config


def load(key: str) -> Any | None:
    """The cached executable for `key`, or None (missing, unreadable or stale). Counts
    `PersistentCacheHit` or `PersistentCacheMiss`, as PyTorch/XLA does, when a cache is on."""
    if _config is None:
        return None
    found = _read(key)
    _metrics.counter("PersistentCacheHit" if found is not None else "PersistentCacheMiss").inc()
    return found


def _read(key: str) -> Any | None:
    path = _entry_path(key)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as error:
        return _ignore_entry(path, _reason(error))
    try:
        payload = decode(data, _salted(key))
    except BadEntry as error:
        return _ignore_entry(path, str(error))
    try:
        return serialize_executable.deserialize_and_load(*pickle.loads(payload))
    except Exception as error:  # verified, but this runtime cannot load it
        return _ignore_entry(path, _reason(error))


def store(key: str, compiled: Any) -> None:
    if _config is None or _config.readonly:
        return
    data = encode(_salted(key), pickle.dumps(serialize_executable.serialize(compiled)))
    try:
        atomic_write(_entry_path(key), data)
    except OSError as error:
        _stop_writing(error)


def clear() -> int:
    """Delete this cache's entries from its folder (not a read-only one, which other runs
    may share, and no other file); the number deleted."""
    config = _config
    if config is None or config.readonly:
        return 0
    try:
        names = os.listdir(config.path)
    except FileNotFoundError:
        return 0
    deleted = 0
    for name in names:
        if _ENTRY_NAME.fullmatch(name):
            try:
                os.unlink(os.path.join(config.path, name))
                deleted += 1
            except FileNotFoundError:  # another process cleared it first
                pass
    return deleted


def encode(key: str, payload: bytes) -> bytes:
    """An entry's bytes: header, key and payload."""
    key_bytes = key.encode()
    body = struct.pack("<I", len(key_bytes)) + key_bytes + payload
    return MAGIC + hashlib.sha256(body).digest() + body


def decode(data: bytes, key: str) -> bytes:
    """The payload of an entry written for `key`; BadEntry if the bytes are not exactly that."""
    if len(data) < HEADER.size:
        raise BadEntry(f"truncated: {len(data)} bytes, shorter than the {HEADER.size}-byte header")
    magic, digest, key_length = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise BadEntry(f"not a torch_xla cache entry of this version (starts {magic!r})")
    if hashlib.sha256(memoryview(data)[HEADER.size - 4:]).digest() != digest:
        raise BadEntry("checksum mismatch: the file is damaged, truncated or extended")
    stored_key = data[HEADER.size:HEADER.size + key_length]
    if stored_key != key.encode():
        raise BadEntry("written for another graph or compiler (its key differs)")
    return data[HEADER.size + key_length:]


def _salted(key: str) -> str:
    # The executable depends on the compiler as much as on the graph.
    return f"{jax.__version__}|{jax.lib.__version__}|{key}"


def _entry_path(key: str) -> str:
    assert _config is not None
    return os.path.join(_config.path, hashlib.sha256(_salted(key).encode()).hexdigest() + ".xla")


_ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.xla")  # the names `_entry_path` gives


def _ignore_entry(path: str, reason: str) -> None:
    _metrics.counter("PersistentCacheCorruptEntry").inc()
    _warn(f"ignoring unreadable compilation cache entry {path} ({reason}); recompiling.")


def _stop_writing(error: OSError) -> None:
    """Make the cache read-only for the rest of the run, saying so once."""
    global _config
    with _lock:
        if _config is None or _config.readonly:
            return  # another thread already said it
        _config = dataclasses.replace(_config, readonly=True)
    _metrics.counter("PersistentCacheWriteError").inc()
    _warn(f"cannot write the compilation cache {_config.path} ({_reason(error)}); running on "
          "without writing to it. Free space or fix the folder's permissions, or pass "
          "initialize_cache() another folder.")


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _warn(message: str, stacklevel: int = 4) -> None:
    # stacklevel 4: past _warn, its helper and load/store, to the line in client.compile
    warnings.warn(f"torch_xla: {message}", RuntimeWarning, stacklevel=stacklevel)
