"""Disk, memory, address-space and thread checks, so a resource limit is one clear error
instead of a crash.

``check_disk``, ``check_memory``, ``check_address_space`` and ``check_threads`` refuse a request
before anything is written, allocated or started (``ValueError`` naming what is needed, what is
free or allowed and how to change it); ``ResourceError`` is what a write that still runs out of
space raises, with the same kind of message, in place of a chain of ``ENOSPC`` tracebacks.
``check_writable`` refuses a directory nothing can be written to (read-only, no permission, a
file in the way) the same way, before any work starts.
"""

from __future__ import annotations

import errno
import os
import resource
import tempfile
from pathlib import Path

__all__ = [
    "STARTUP_ADDRESS_SPACE",
    "ResourceError",
    "address_space_limit",
    "available_memory_bytes",
    "check_address_space",
    "check_disk",
    "check_memory",
    "check_start_up_address_space",
    "check_threads",
    "check_writable",
    "file_size_limit",
    "format_bytes",
    "format_bytes_apart",
    "free_disk_bytes",
    "is_out_of_space",
    "out_of_space_error",
    "thread_stack_bytes",
]


class ResourceError(OSError):
    """A write or mapping failed for lack of disk space or memory; the message is one line
    naming the path, what was needed or free, and the fix."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.errno = code


def format_bytes(count: float, digits: int = 1) -> str:
    """``1536`` -> ``"1.5 KiB"``; binary units up to PiB, ``digits`` after the point."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.{digits}f} {unit}"
        value /= 1024
    return f"{value:.{digits}f} PiB"


def format_bytes_apart(needed: float, limit: float) -> tuple[str, str]:
    """``needed`` and ``limit`` formatted with as many digits as it takes to tell them apart,
    so that a refusal never reads "needs 2.0 GiB ... only 2.0 GiB"."""
    for digits in range(1, 7):
        pair = format_bytes(needed, digits), format_bytes(limit, digits)
        if pair[0] != pair[1]:
            break
    return pair


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_disk_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes an unprivileged process may still write on the file system holding ``path``
    (or its nearest existing ancestor)."""
    stats = os.statvfs(_existing_ancestor(Path(path)))
    return stats.f_bavail * stats.f_frsize


def available_memory_bytes() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo``, or None where it is not known."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_disk(path: str | os.PathLike[str], needed: int, what: str, fix: str) -> None:
    """Refuses to write ``needed`` bytes under ``path`` when the disk has less free.

    Args:
        path: where the bytes will go (it need not exist yet).
        needed: bytes about to be written.
        what: what is written, e.g. ``"the noise table"``.
        fix: how the user can make room or move the write, appended to the message.

    Raises:
        ValueError: not enough free space; the message names needed vs free.
    """
    free = free_disk_bytes(path)
    if needed > free:
        need, have = format_bytes_apart(needed, free)
        raise ValueError(f"{what} needs {need} of disk in {path} but only {have} is free; {fix}")


def check_memory(needed: int, what: str, fix: str) -> None:
    """Refuses to allocate ``needed`` bytes when the machine has less memory available.

    Raises:
        ValueError: not enough memory; the message names needed vs available.
    """
    available = available_memory_bytes()
    if available is not None and needed > available:
        need, have = format_bytes_apart(needed, available)
        raise ValueError(f"{what} needs {need} of memory but only {have} is available; {fix}")


STARTUP_ADDRESS_SPACE = 2 << 30
"""Address space (virtual memory) a neuroevo process maps to start: TensorFlow, the op
libraries and a tiny run's env, model and two workers. Measured: the tiny Atari run peaks at
2.0 GiB (VmPeak) and fails below about 1.9 GiB of ``ulimit -v``, with a MemoryError, a
ResourceExhaustedError or an abort inside TensorFlow depending on where the limit bites."""

DEFAULT_THREAD_STACK = 8 << 20
"""A thread's stack when ``RLIMIT_STACK`` is unlimited (glibc's default on Linux)."""


def _soft_limit(which: int) -> int | None:
    soft = resource.getrlimit(which)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def address_space_limit() -> int | None:
    """This process's address-space limit (``ulimit -v``, ``RLIMIT_AS``) in bytes, or None."""
    return _soft_limit(resource.RLIMIT_AS)


def thread_stack_bytes() -> int:
    """Address space one new thread reserves for its stack (``RLIMIT_STACK``, as glibc)."""
    stack = _soft_limit(resource.RLIMIT_STACK)
    return stack or DEFAULT_THREAD_STACK


def check_address_space(needed: int, what: str, fix: str) -> None:
    """Refuses a process that would map more than its address-space limit allows.

    Raises:
        ValueError: naming what needs the space, how much, the limit and ``fix``.
    """
    limit = address_space_limit()
    if limit is not None and needed > limit:
        need, allowed = format_bytes_apart(needed, limit)
        raise ValueError(
            f"{what} needs {need} of address space but this process may map only {allowed} "
            f"(ulimit -v); {fix}"
        )


def check_start_up_address_space() -> None:
    """Refuses to start TensorFlow under an address-space limit it cannot start in (it would
    abort or fail in its own code)."""
    check_address_space(
        STARTUP_ADDRESS_SPACE,
        "starting TensorFlow and neuroevo's op libraries",
        f"raise the limit to at least {format_bytes(STARTUP_ADDRESS_SPACE)} "
        f"(ulimit -v {STARTUP_ADDRESS_SPACE >> 10})",
    )


def _threads_of_user(uid: int) -> int:
    """Threads of all processes of ``uid`` (what ``RLIMIT_NPROC`` counts), from /proc."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:  # the process ended meanwhile
                continue
    return count


def _threads_in_system() -> tuple[int, int] | None:
    """``(threads now, threads-max)`` of the kernel, or None where unknown."""
    try:
        running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])
        maximum = int(Path("/proc/sys/kernel/threads-max").read_text())
    except (OSError, ValueError, IndexError):
        return None
    return running, maximum


def check_threads(count: int, what: str, fix: str) -> None:
    """Refuses to start ``count`` more threads when the user's process limit
    (``RLIMIT_NPROC``, ``ulimit -u``; not applied to root) or the kernel's ``threads-max``
    leaves fewer.

    Raises:
        ValueError: naming what needs the threads, how many, the limit and ``fix``.
    """
    limit = _soft_limit(resource.RLIMIT_NPROC)
    if limit is not None and os.geteuid() != 0:
        free = limit - _threads_of_user(os.geteuid())
        if count > free:
            raise ValueError(
                f"{what} needs {count:,} threads but the process limit (ulimit -u) "
                f"{limit:,} leaves {max(free, 0):,} for this user; {fix}"
            )
    system = _threads_in_system()
    if system is not None and count > system[1] - system[0]:
        raise ValueError(
            f"{what} needs {count:,} threads but the kernel allows {system[1]:,} in all "
            f"(/proc/sys/kernel/threads-max) and {system[0]:,} run; {fix}"
        )


def is_out_of_space(exc: BaseException) -> bool:
    """True for the errors a full disk, a quota or a file-size limit gives (``ENOSPC``,
    ``EDQUOT``, ``EFBIG``)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def file_size_limit() -> int | None:
    """This process's file-size limit (``ulimit -f``, ``RLIMIT_FSIZE``) in bytes, or None."""
    return _soft_limit(resource.RLIMIT_FSIZE)


def out_of_space_error(
    exc: OSError, path: str | os.PathLike[str], then: str, what: str | None = None
) -> ResourceError:
    """The one-line error for an ``exc`` that :func:`is_out_of_space` accepts while ``path``
    (``what``, default the path) was written, naming what stopped the write so that the advice
    fits: a full disk or quota (with the free space), or a file-size limit (``EFBIG``: ``ulimit
    -f``, or the largest file the file system holds). ``then`` says what to do once there is
    room (e.g. resume the run)."""
    path = Path(path)
    what = str(path) if what is None else what
    if exc.errno == errno.EFBIG:
        limit = file_size_limit()
        if limit is None:
            return ResourceError(
                f"{what} would be larger than its file system allows: write it to another "
                f"file system, then {then}",
                exc.errno,
            )
        return ResourceError(
            f"the file-size limit (ulimit -f, {format_bytes(limit)}) stopped writing {what}: "
            f"raise the limit (ulimit -f unlimited), then {then}",
            exc.errno,
        )
    free = format_bytes(free_disk_bytes(path.parent))
    return ResourceError(
        f"disk full while writing {what} ({free} free): free some space, then {then}", exc.errno
    )


def check_writable(directory: str | os.PathLike[str], what: str, fix: str) -> None:
    """Refuses to write into ``directory`` (or, if it does not exist yet, the nearest existing
    directory it would be created in) when a file cannot be created there.

    A file is really created and removed, so a read-only mount, an immutable directory, a
    missing permission, root or not, and a path through a regular file are all caught before
    any work starts.

    Args:
        directory: where files will be written; it need not exist yet.
        what: what is written, e.g. ``"the run directory runs/x"``.
        fix: how the user can make it writable or write elsewhere, appended to the message.

    Raises:
        ValueError: nothing can be written there; the message names the path and the reason.
    """
    path = Path(directory).absolute()
    while not path.exists() and path != path.parent:
        if path.is_symlink():  # a dangling link: creating through it fails
            break
        path = path.parent
    if path.exists() and not path.is_dir():
        raise ValueError(f"cannot write {what}: {path} is a file, not a directory; {fix}")
    try:
        handle, probe = tempfile.mkstemp(prefix=".neuroevo-write-test-", dir=path)
    except OSError as exc:
        raise ValueError(f"cannot write {what}: {path}: {exc.strerror}; {fix}") from None
    os.close(handle)
    os.unlink(probe)
