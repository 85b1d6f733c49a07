"""What the command-line entry points share: which errors are the user's, and how they end.

A user mistake (bad config or argument, a run directory that cannot be used, a missing extra,
a full disk or too little memory) ends a command with one ``error: ...`` line on stderr and
exit code 2, never a traceback; Ctrl-C ends it with one line and exit code 130. Every such
error is one of :data:`USER_ERRORS`: the config, the run directory, ``neuroevo.indices``
(``InvalidInputError``) and ``neuroevo.extras`` (``MissingExtraError``) raise ``ValueError``
subclasses; ``neuroevo.resources`` raises ``ResourceError``; the Ray backend raises a
``ConnectionError`` for an unreachable cluster. An ``OSError`` about a path (a read-only
mount, an immutable or missing file: :func:`is_file_error`) is one line too.
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from neuroevo.resources import ResourceError, check_writable

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_USER_ERROR",
    "FILE_ERRNOS",
    "USER_ERRORS",
    "Parser",
    "fail",
    "is_file_error",
    "output_file",
    "run_command",
]

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it

USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    ConnectionError,  # an unreachable Ray cluster (evaluator.ray.address)
    ResourceError,
)
"""Exceptions that mean bad input or a resource limit, not a bug in neuroevo."""


FILE_ERRNOS = frozenset(
    {
        errno.EROFS,  # a read-only mount
        errno.EACCES,
        errno.EPERM,  # an immutable file or directory
        errno.ENOENT,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EEXIST,
        errno.ENAMETOOLONG,
        errno.ELOOP,
        errno.EIO,
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EFBIG,
    }
)
"""``errno`` values of an ``OSError`` that mean a path cannot be read or written as asked (a
read-only or full disk, a missing or misplaced file), which :func:`is_file_error` treats as a
user error like :data:`USER_ERRORS`."""


def is_file_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an ``OSError`` about a path the user can fix (:data:`FILE_ERRNOS`)."""
    return isinstance(exc, OSError) and exc.errno in FILE_ERRNOS


def fail(message: object, code: int = EXIT_USER_ERROR) -> int:
    """Prints ``message`` as one ``error:`` line on stderr and returns ``code``.

    Line breaks inside the message (from a library's error text) are folded into spaces so
    that the message stays one line.
    """
    print("error: " + " ".join(str(message).split()), file=sys.stderr)
    return code


def run_command(command: Callable[[], int]) -> int:
    """Runs a command's body and returns its exit code; a user error (``USER_ERRORS``, or a
    path that cannot be read or written: :func:`is_file_error`) or a Ctrl-C ends it with its
    one line and exit code instead."""
    try:
        return command()
    except USER_ERRORS as exc:
        return fail(exc)
    except OSError as exc:
        if not is_file_error(exc):
            raise
        return fail(exc)
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)


def output_file(
    path: Path, flag: str, suffixes: tuple[str, ...], default_name: str | None = None
) -> Path:
    """The file a command will write for option ``flag``, checked before any work starts.

    An existing directory gets ``default_name`` inside it (refused when there is none), a name
    without a suffix gets ``suffixes[0]``; the suffix must be one of ``suffixes``, and the
    directory it goes in (or, if that does not exist yet and will be created, its nearest
    existing ancestor) must be writable.

    Raises:
        ValueError: the path cannot be written as asked; the message names the fix.
    """
    if path.is_dir():
        if default_name is None:
            example = path / f"out{suffixes[0]}"
            raise ValueError(f"{flag} {path} is a directory; give a file name such as {example}")
        path = path / default_name
    if not path.suffix:
        path = path.with_name(path.name + suffixes[0])
    if path.suffix.lower() not in suffixes:
        raise ValueError(
            f"{flag} {path}: cannot write a {path.suffix!r} file; use one of {', '.join(suffixes)}"
        )
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give another file name")
    check_writable(path.parent, f"{flag} {path}", f"choose another {flag}")
    return path


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line too (argparse prints the whole
    usage first); ``--help`` shows the usage."""

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog}: {message} (see --help)")
        sys.exit(EXIT_USER_ERROR)
