"""What the command-line entry points share: which errors are the user's, and how they end.

A user mistake (bad config or argument, a run directory that cannot be used, a missing extra,
a full disk or too little memory) ends a command with one ``error: ...`` line on stderr and
exit code 2, never a traceback; Ctrl-C ends it with one line and exit code 130. Every such
error is one of :data:`USER_ERRORS`: the config, the run directory, ``neuroevo.indices``
(``InvalidInputError``) and ``neuroevo.extras`` (``MissingExtraError``) raise ``ValueError``
subclasses; ``neuroevo.resources`` raises ``ResourceError``; the Ray backend raises a
``ConnectionError`` for an unreachable cluster.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from neuroevo.resources import ResourceError

__all__ = ["EXIT_INTERRUPTED", "EXIT_USER_ERROR", "USER_ERRORS", "Parser", "fail", "run_command"]

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


def fail(message: object, code: int = EXIT_USER_ERROR) -> int:
    """Prints ``message`` as one ``error:`` line on stderr and returns ``code``.

    Line breaks inside the message (from a library's error text) are folded into spaces so
    that the message stays one line.
    """
    print("error: " + " ".join(str(message).split()), file=sys.stderr)
    return code


def run_command(command: Callable[[], int]) -> int:
    """Runs a command's body and returns its exit code; a user error (``USER_ERRORS``) or a
    Ctrl-C ends it with its one line and exit code instead."""
    try:
        return command()
    except USER_ERRORS as exc:
        return fail(exc)
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line too (argparse prints the whole
    usage first); ``--help`` shows the usage."""

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog}: {message} (see --help)")
        sys.exit(EXIT_USER_ERROR)
