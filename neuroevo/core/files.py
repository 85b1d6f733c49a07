"""Writing files where someone else may have left links: the one way neuroevo replaces a file.

A run directory can come from someone else (copied, unpacked, shared), so anything in it may be
a symbolic link planted to make neuroevo write another file. Every file neuroevo replaces whole
(``config.yaml``, ``metrics.csv`` on resume, ``elite.npz``, ``best.npz``, ``test.json``, the
TensorBoard rewrite on resume, the noise table and its check file) goes through
:func:`atomic_write`: its temporary file is created exclusively (``O_CREAT | O_EXCL |
O_NOFOLLOW``) after whatever held its name was removed (a leftover of a killed write, or a
planted link: removed, never followed), fsynced, then renamed over the target, which replaces
a link at the target itself rather than the file it points to. A file appended to or shared
(``metrics.csv`` rows, the noise table's lock) is opened with ``O_NOFOLLOW``
(:func:`open_no_follow`), and a run's own subdirectories must be real directories
(:func:`check_real_directory`).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_write", "check_real_directory", "fsync_dir", "open_no_follow", "temp_path"]

_EXCLUSIVE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def temp_path(path: Path) -> Path:
    """The temporary file :func:`atomic_write` writes ``path`` through by default."""
    return path.with_name(f".{path.name}.tmp")


def fsync_dir(path: Path) -> None:
    """Makes renames and new entries in a directory durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], temp: Path | None = None) -> Iterator[BinaryIO]:
    """Yields a binary file whose content replaces ``path`` when the block ends without error.

    The file is a new temporary one beside ``path`` (``temp``, default :func:`temp_path`),
    created exclusively after whatever held that name was removed; it is flushed, fsynced,
    renamed over ``path`` and the directory fsynced. On any error or interrupt the temporary
    file is removed and ``path`` keeps its old content. Callers that may run concurrently on
    the same ``path`` pass their own ``temp`` name.

    Raises:
        OSError: the temporary file cannot be created or written (a full disk, a read-only
            directory, a directory in the way); nothing is left behind.
    """
    path = Path(path)
    temp = temp_path(path) if temp is None else temp
    temp.unlink(missing_ok=True)  # a link is removed, not followed
    fd = os.open(temp, _EXCLUSIVE, 0o666)
    try:
        with open(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def open_no_follow(path: Path, append: bool) -> BinaryIO:
    """Opens ``path`` for writing without following a link there (``ELOOP`` instead): appended
    to with ``append``, else created or truncated."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_APPEND if append else os.O_TRUNC
    return open(os.open(path, flags, 0o666), "ab" if append else "wb")


def try_lock(path: Path) -> io.FileIO | None:
    """Takes the OS's exclusive lock (``flock``) on ``path``, created if missing and never
    through a link, without waiting: the open file while held (closing it, or the process
    ending, frees the lock, so a killed holder leaves none behind), None when another open
    file holds it."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    lock = io.FileIO(os.open(path, flags, 0o666), "r+")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


def check_real_directory(path: Path, what: str) -> None:
    """Refuses a symbolic link where a run keeps its own directory (files written and pruned
    there would land in the directory it points to).

    Raises:
        ValueError: naming the link, where it points and the fix.
    """
    if path.is_symlink():
        raise ValueError(
            f"{what} {path} is a symbolic link (to {os.readlink(path)}); a run writes and "
            "deletes files there, so it must be a real directory: remove the link"
        )
