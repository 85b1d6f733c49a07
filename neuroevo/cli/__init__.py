"""What the command-line entry points share: which errors are the user's, and how they end.

A user mistake (bad config or argument, a run directory that cannot be used, a missing extra,
a full disk or too little memory) ends a command with one ``error: ...`` line on stderr and
exit code 2, never a traceback; Ctrl-C ends it with one line and exit code 130. Every such
error is one of :data:`USER_ERRORS`: the config, the run directory, ``neuroevo.indices``
(``InvalidInputError``) and ``neuroevo.extras`` (``MissingExtraError``) raise ``ValueError``
subclasses; ``neuroevo.resources`` raises ``ResourceError``; the Ray backend raises a
``ConnectionError`` for an unreachable cluster. An ``OSError`` about a path (a read-only
mount, an immutable or missing file: :func:`is_file_error`) is one line too.

TensorFlow writes start-up lines to stderr from C++ while it is imported (on CPUs with AVX-512
VNNI, ``oneDNN custom operations are on`` behind absl's ``All log messages before
absl::InitializeLog()`` banner), before ``TF_CPP_MIN_LOG_LEVEL`` takes effect. Every entry point
calls :func:`quiet_tensorflow_start_up` first, which filters those lines by the level that
variable sets, so the one ``error:`` line stays the whole of stderr on every CPU.
"""

from __future__ import annotations

import argparse
import errno
import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import NoReturn

from neuroevo.resources import (
    ResourceError,
    address_space_limit,
    available_memory_bytes,
    check_writable,
    format_bytes,
)

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_USER_ERROR",
    "FILE_ERRNOS",
    "USER_ERRORS",
    "Parser",
    "add_allow_imports",
    "fail",
    "is_file_error",
    "is_out_of_memory",
    "one_line_warnings",
    "out_of_memory_message",
    "output_file",
    "quiet_tensorflow_start_up",
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


TF_LOG_LEVEL = "2"
"""``TF_CPP_MIN_LOG_LEVEL`` of the entry points unless the user sets one: warnings and info
lines hidden, errors shown."""

_ABSL_BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to"
_LOG_LINE = re.compile(r"^([IWEF])\d{4} [\d:.]+ +\d+ \S+:\d+\] ")  # absl / glog prefix
_SEVERITY = "IWEF"  # TF_CPP_MIN_LOG_LEVEL n hides the first n of these


def _shown(line: str, min_level: int) -> bool:
    """Whether a line TensorFlow wrote while it was imported passes ``min_level``."""
    if line.startswith(_ABSL_BANNER):
        return min_level == 0
    match = _LOG_LINE.match(line)
    return match is None or _SEVERITY.index(match.group(1)) >= min_level


@contextmanager
def _stderr_filtered(min_level: int) -> Iterator[None]:
    """Sends file descriptor 2 (C++ and Python writes alike) to a temporary file for the
    duration, then writes back the lines :func:`_shown` keeps, even when the body raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode(errors="replace")
            kept = [line for line in text.splitlines(keepends=True) if _shown(line, min_level)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


class _QuietLoader(importlib.abc.Loader):
    """Runs TensorFlow's own loader with its start-up lines filtered."""

    def __init__(self, loader: importlib.abc.Loader, min_level: int):
        self._loader = loader
        self._min_level = min_level

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = module.__spec__.loader = self._loader  # as if never wrapped
        with _stderr_filtered(self._min_level):
            self._loader.exec_module(module)


class _QuietTensorFlowFinder(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` as usual and wraps its loader in :class:`_QuietLoader`, once."""

    def __init__(self, min_level: int):
        self.min_level = min_level

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader, self.min_level)
        return spec


def quiet_tensorflow_start_up() -> None:
    """Makes TensorFlow's import as quiet as ``TF_CPP_MIN_LOG_LEVEL`` says (default
    :data:`TF_LOG_LEVEL`), its C++ start-up lines included; call it before anything imports
    TensorFlow. TensorFlow is still imported only when a module needs it, and its numerics are
    unchanged (oneDNN stays as TensorFlow chooses). A no-op once TensorFlow is imported."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", TF_LOG_LEVEL)
    if "tensorflow" in sys.modules or any(
        isinstance(finder, _QuietTensorFlowFinder) for finder in sys.meta_path
    ):
        return
    try:
        min_level = min(max(int(os.environ["TF_CPP_MIN_LOG_LEVEL"]), 0), 3)
    except ValueError:
        min_level = int(TF_LOG_LEVEL)
    if min_level > 0:
        sys.meta_path.insert(0, _QuietTensorFlowFinder(min_level))


def fail(message: object, code: int = EXIT_USER_ERROR) -> int:
    """Prints ``message`` as one ``error:`` line on stderr and returns ``code``.

    Line breaks inside the message (from a library's error text) are folded into spaces so
    that the message stays one line.
    """
    print("error: " + " ".join(str(message).split()), file=sys.stderr)
    return code


def is_out_of_memory(exc: BaseException) -> bool:
    """A ``MemoryError`` or TensorFlow's ``ResourceExhaustedError`` (checked by name, so that
    TensorFlow need not be imported)."""
    return isinstance(exc, MemoryError) or type(exc).__name__ == "ResourceExhaustedError"


def out_of_memory_message(exc: BaseException) -> str:
    """One line for an allocation that failed: what failed and the two limits to look at."""
    detail = str(getattr(exc, "message", None) or exc).strip().splitlines()
    what = f"{type(exc).__name__}: {detail[0][:200]}" if detail else type(exc).__name__
    limit = address_space_limit()
    allowed = "unlimited" if limit is None else format_bytes(limit)
    return (
        f"out of memory ({what}); the machine has {format_bytes(available_memory_bytes() or 0)} "
        f"available and this process may map {allowed} (ulimit -v): lower the run's sizes "
        "(population, slots, network, noise.size) or free memory / raise the limit"
    )


def run_command(
    command: Callable[[], int], interrupted: Callable[[], str] = lambda: "interrupted"
) -> int:
    """Runs a command's body and returns its exit code; a user error (``USER_ERRORS``, or a
    path that cannot be read or written: :func:`is_file_error`), an allocation that failed or
    a Ctrl-C (its line from ``interrupted``) ends it with its one line and exit code instead.
    Warnings meanwhile are one line each (:func:`one_line_warnings`)."""
    try:
        with one_line_warnings():
            return command()
    except USER_ERRORS as exc:
        return fail(exc)
    except OSError as exc:
        if not is_file_error(exc):
            raise
        return fail(exc)
    except KeyboardInterrupt:
        return fail(interrupted(), EXIT_INTERRUPTED)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        return fail(out_of_memory_message(exc))


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


def add_allow_imports(parser: argparse.ArgumentParser, applies_to: str) -> None:
    """The ``--allow-imports`` flag: a run directory whose config names Python modules to
    import (``neuroevo.config.imported_modules``) is code, used only when the user says they
    trust it (README, "Trust")."""
    parser.add_argument(
        "--allow-imports",
        action="store_true",
        help=f"{applies_to}: let the run's config import the Python modules it names "
        "(env.gym.behavior, an env.id 'module:Name'); their code runs, so only for runs you "
        "trust",
    )


def _warning_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    line: str | None = None,
) -> str:
    """A warning as one ``warning: ...`` line, without the file, line number and source
    line of the ``warnings.warn`` call (they say nothing to a command's user)."""
    kind = "" if category is UserWarning else f"{category.__name__}: "
    return "warning: " + kind + " ".join(str(message).split()) + "\n"


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """Prints warnings as single ``warning:`` lines for the duration (an entry point's
    body); the previous format is restored after, since tests call entry points in-process."""
    saved = warnings.formatwarning
    warnings.formatwarning = _warning_line
    try:
        yield
    finally:
        warnings.formatwarning = saved


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line too (argparse prints the whole
    usage first); ``--help`` shows the usage."""

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog}: {message} (see --help)")
        sys.exit(EXIT_USER_ERROR)
