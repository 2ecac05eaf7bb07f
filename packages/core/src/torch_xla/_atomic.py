"""Atomic file writes: readers see the old file or the new one, never a mix.

Checkpoints and cache entries are written to a temporary file in the same
folder, flushed to disk, then renamed over the target; a crash at any moment
leaves the previous file intact.

A device, FIFO or socket (`os.devnull`) is written in place: a rename would replace
it with a regular file. The temporary file is `.<name>.<16 hex digits>.tmp`. It is created the way
`open(path, "wb")` would create `path` (the umask applies; a replaced file
keeps its mode), so the result has the permissions `torch.save` gives. Its
writer holds an exclusive `flock` on it until the rename; a killed writer's
lock dies with it, which is how the next write to the same target tells an
abandoned temporary file (removed) from one still being written (kept).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import re
import secrets
import stat
from collections.abc import Iterator
from typing import IO

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
# A file system that cannot lock gives one of these; its writes go unlocked
# and its abandoned temporary files are left alone rather than guessed at.
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, *, clean_stale: bool = True) -> Iterator[IO[bytes]]:
    """A binary file that replaces `path` only when the `with` block completes.

    An `OSError` about the write names `path`, never the temporary file. With
    `clean_stale`, a successful write also removes the temporary files that
    killed writers of `path` left behind (pass False in a fresh folder).
    """
    path = os.fspath(path)
    if _special(path):  # a device or a pipe (`xm.save(state, os.devnull)`): never replaced
        with open(path, "wb") as f:
            yield f
        return
    fd, tmp = _create_locked_temp(path)
    f = _RecordingWriter(io.FileIO(fd, "wb"))
    try:
        with f:  # closing it releases the lock: after the rename
            yield f
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        cause = error if isinstance(error, OSError) else f.write_error
        named = error_naming(path, cause, tmp) if cause is not None else error
        if named is error:
            raise
        raise named from error
    if clean_stale:
        remove_abandoned_temps(path)


def _special(path: str) -> bool:
    """Whether `path` names something other than a regular file or nothing: a device, a
    FIFO or a socket, which a rename would replace with a regular file (as root, even
    /dev/null) and whose writes have no earlier content to protect."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


class _RecordingWriter(io.BufferedWriter):
    """A file that remembers its failed write: torch.save reports one as a RuntimeError
    about a stream position, and this error is what the user needs to see."""

    write_error: OSError | None = None

    def write(self, data) -> int:
        try:
            return super().write(data)
        except OSError as error:
            self.write_error = error
            raise

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as error:
            self.write_error = error
            raise


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    with atomic_open(path) as f:
        f.write(data)


def error_naming(path: str, error: OSError, internal: str | None = None) -> OSError:
    """`error` reworded to name `path`, the file the user asked for.

    Errors that name some other file (not `internal`, our own temporary or
    helper path) are returned unchanged: they are about that file.
    """
    if error.errno is None or error.filename not in (None, internal):
        return error
    why = os.strerror(error.errno)  # the cause alone: `error` itself is chained
    folder = os.path.dirname(os.path.abspath(path))
    if isinstance(error, FileNotFoundError) and not os.path.isdir(folder):
        why += f" (the folder {folder!r} does not exist; create it first)"
    return type(error)(error.errno, why, path)


def remove_abandoned_temps(path: str | os.PathLike) -> None:
    """Delete the temporary files of `path` whose writers are dead (no one holds the lock)."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    pattern = _temp_name_pattern(name)
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for candidate in names:
        if pattern.fullmatch(candidate):
            _remove_if_abandoned(os.path.join(folder, candidate))


def _temp_name_pattern(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(f".{name}.") + r"[0-9a-f]{16}\.tmp")


def _create_locked_temp(path: str) -> tuple[int, str]:
    folder, name = os.path.split(os.path.abspath(path))
    mode = _mode_for(path)
    while True:
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, _CREATE, 0o666)  # the umask applies, as for open(path, "wb")
        except FileExistsError:
            continue
        except OSError as error:
            raise error_naming(path, error, tmp) from error
        try:
            if _lock_and_keep(fd, tmp, mode):
                return fd, tmp
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            os.close(fd)
            raise
        os.close(fd)  # a cleaner took it between create and lock: start again


def _mode_for(path: str) -> int | None:
    """The mode of the file being replaced (torch.save keeps it), or None for a new file."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None


def _lock_and_keep(fd: int, tmp: str, mode: int | None) -> bool:
    """Lock our new temporary file; False if it was removed before the lock held."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocks only while a cleaner inspects it
    except OSError as error:
        if error.errno not in _NO_LOCKS:
            raise
    try:
        if not _same_file(os.fstat(fd), os.stat(tmp)):
            return False
    except FileNotFoundError:
        return False
    if mode is not None:
        os.fchmod(fd, mode)
    return True


def _remove_if_abandoned(tmp: str) -> None:
    fd = _open_to_lock(tmp)
    if fd is None:  # gone, renamed, a link, or not ours to open: leave it
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while its writer lives
        opened = os.fstat(fd)
        if stat.S_ISREG(opened.st_mode) and _same_file(opened, os.stat(tmp)):
            os.unlink(tmp)
    except OSError:  # locked by a live writer, renamed meanwhile, or unlockable here
        pass
    finally:
        os.close(fd)


def _open_to_lock(tmp: str) -> int | None:
    # Write access first: NFS grants an exclusive lock only to a file open for writing.
    flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK  # a FIFO must not block us
    for access in (os.O_WRONLY, os.O_RDONLY):
        try:
            return os.open(tmp, access | flags)
        except PermissionError:
            continue
        except OSError:
            return None
    return None


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
