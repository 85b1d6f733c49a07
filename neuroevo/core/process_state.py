"""Process-wide state a library call changes through another library, put back when it returns.

``ray.init`` installs a SIGTERM handler, enables ``faulthandler`` and sets environment variables
(``PYTHONBREAKPOINT`` among them, which sends a notebook's later ``breakpoint()`` to Ray's
remote debugger); ``ray.shutdown`` undoes none of it. A call such as ``ne.train`` or an
evaluator's ``close`` must leave the process as it found it (a notebook's Ctrl-C, its
debugger, its signal handlers), so the code that starts such a library records what the start
changed (:func:`recorded_changes`) and undoes exactly that when it is done
(:meth:`ProcessChanges.undo`): a value someone else set meanwhile is left alone. A library's
own setting that it also keeps in the process's memory (``RAY_AUTH_MODE``) is not put back:
undoing only half of it would leave the process inconsistent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["ProcessChanges", "recorded_changes"]

_SIGNALS = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))


def _handlers() -> dict[int, Any]:
    return {number: signal.getsignal(number) for number in _SIGNALS}


@dataclasses.dataclass
class ProcessChanges:
    """What a block changed: each item maps a name to ``(before, after)``.

    Attributes:
        handlers: signal number -> handlers.
        environ: environment variable -> values (None: unset).
        cwd: ``(before, after)`` working directory, or None if unchanged.
        faulthandler: ``(before, after)`` of ``faulthandler.is_enabled()``, or None.
    """

    handlers: dict[int, tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    environ: dict[str, tuple[str | None, str | None]] = dataclasses.field(default_factory=dict)
    cwd: tuple[str, str] | None = None
    faulthandler: tuple[bool, bool] | None = None

    def undo(self) -> None:
        """Puts back every recorded value that still is what the block left (signal handlers
        only from the main thread, where Python allows setting them)."""
        main = threading.current_thread() is threading.main_thread()
        for number, (before, after) in self.handlers.items():
            if main and before is not None and signal.getsignal(number) is after:
                signal.signal(number, before)
        for name, (before, after) in self.environ.items():
            if os.environ.get(name) == after:
                _set_env(name, before)
        if self.cwd is not None and os.getcwd() == self.cwd[1]:
            with contextlib.suppress(OSError):  # the old directory was removed meanwhile
                os.chdir(self.cwd[0])
        if self.faulthandler is not None and faulthandler.is_enabled() == self.faulthandler[1]:
            (faulthandler.enable if self.faulthandler[0] else faulthandler.disable)()


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _changed(before: dict, after: dict) -> dict:
    return {
        key: (before.get(key), after.get(key))
        for key in before.keys() | after.keys()
        if before.get(key) != after.get(key)
    }


def _snapshot() -> tuple[dict[int, Any], dict[str, str], str, bool]:
    return _handlers(), dict(os.environ), os.getcwd(), faulthandler.is_enabled()


@contextlib.contextmanager
def recorded_changes(keep_environ: tuple[str, ...] = ()) -> Iterator[ProcessChanges]:
    """Yields a :class:`ProcessChanges` that, once the block ends (also by an exception),
    holds what the block changed in signal handlers, environment variables, the working
    directory and ``faulthandler``.

    Args:
        keep_environ: environment variables the block may set for good: they are not
            recorded, so :meth:`ProcessChanges.undo` leaves them as the block left them.
    """
    changes = ProcessChanges()
    handlers, environ, cwd, faults = _snapshot()
    try:
        yield changes
    finally:
        handlers_now, environ_now, cwd_now, faults_now = _snapshot()
        changes.handlers = _changed(handlers, handlers_now)
        changes.environ = {
            name: values
            for name, values in _changed(environ, environ_now).items()
            if name not in keep_environ
        }
        changes.cwd = None if cwd == cwd_now else (cwd, cwd_now)
        changes.faulthandler = None if faults == faults_now else (faults, faults_now)
