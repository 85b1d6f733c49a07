"""A local Ray started for one process, and a watchdog that ends it when that process dies.

``ray.init()`` without an address starts a whole Ray node (GCS, raylet, dashboard head and
agents, log monitor) as children of the driver. When the driver exits normally
``ray.shutdown()`` stops them, but a driver killed with SIGKILL (or by the OOM killer) cannot:
the GCS and raylet notice and exit, while the dashboard and runtime-env agents (~85 MB each)
were seen to live on. :func:`init_local_ray` therefore starts Ray without the dashboard and
launches a small watchdog process that holds the read end of a pipe whose write end only the
driver holds. The pipe reads end-of-file when the driver dies, however it dies, with no pid to
reuse; the watchdog then ends every Ray process it saw descend from the driver (SIGTERM, then
SIGKILL after a grace period) and exits. Processes are matched by pid *and* start time, so a
reused pid is never signalled, and only Ray's processes (``ray::...``, Ray's binaries and
scripts, read from whole command lines) are touched.

Linux only (it reads ``/proc``); elsewhere Ray starts as before, without the watchdog. This file
imports only the standard library at module level: the watchdog runs it as a script
(``python -I local.py FD PID``) without importing neuroevo, TensorFlow or Ray.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = [
    "RAY_SESSION_ENVIRON",
    "LocalRay",
    "RayStartError",
    "command_line",
    "init_local_ray",
    "ray_descendants",
    "running",
]

RAY_SESSION_ENVIRON = ("RAY_AUTH_MODE",)
"""Environment variables ``ray.init`` sets that must stay set after ``ray.shutdown``: Ray
also keeps them in the process's memory (token authentication, Ray >= 2.5x). Removing
``RAY_AUTH_MODE`` again leaves the driver in token mode while a node the same process starts
later (``ray.cluster_utils.Cluster``, a second local Ray) runs without it, and every actor on
that node is cancelled before it starts."""

POLL_S = 0.5
"""How often the watchdog records the driver's Ray descendants while the driver lives."""

GRACE_S = 3.0
"""How long a Ray process gets to exit after SIGTERM before it is killed."""

PROC = Path("/proc")


class RayStartError(ConnectionError):
    """Ray could not start a node for this process (a CLI maps this to one ``error:`` line and
    exit 2, as an unreachable cluster)."""


def _stat(pid: int) -> tuple[int, int] | None:
    """``(parent pid, start time in clock ticks)`` of ``pid``, or None if it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and ')'
    return int(fields[1]), int(fields[19])


def command_line(pid: int) -> list[str] | None:
    """The whole command line of ``pid``, one string per argument (``/proc/PID/cmdline`` is
    NUL-separated and read to its end, however long the paths), or None if it is gone."""
    try:
        data = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [arg.decode(errors="replace") for arg in data.split(b"\0")]


@functools.cache
def _ray_package() -> str | None:
    """Where Ray is installed, with a trailing separator (found, not imported: the watchdog
    imports no Ray)."""
    spec = importlib.util.find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(os.path.realpath(spec.submodule_search_locations[0]), "")


def _is_ray(pid: int) -> bool:
    """Whether ``pid`` runs a Ray component: a ``ray::`` worker or agent (its process
    title), or one of Ray's binaries or Python scripts, an executable or script file inside
    Ray's package (``.../site-packages/ray/core/src/ray/raylet/raylet``); a path that merely
    contains ``ray`` (this watchdog's own script) is not one."""
    argv = command_line(pid)
    if not argv:
        return False
    if argv[0].startswith("ray::"):
        return True
    package = _ray_package()
    files = [argv[0], *(arg for arg in argv[1:3] if arg and not arg.startswith("-"))]
    return package is not None and any(os.path.realpath(f).startswith(package) for f in files)


def ray_descendants(root: int) -> set[tuple[int, int]]:
    """``(pid, start time)`` of every live Ray process descending from ``root``."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                children.setdefault(stat[0], []).append(int(entry.name))
    found: set[tuple[int, int]] = set()
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        stat = _stat(pid)
        if stat is not None and pid != os.getpid() and _is_ray(pid):
            found.add((pid, stat[1]))
    return found


def running(processes: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Those of ``processes`` still running (same pid and start time, not a zombie)."""
    alive = set()
    for pid, start in processes:
        stat = _stat(pid)
        if stat is None or stat[1] != start:
            continue
        with contextlib.suppress(OSError):
            state = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state not in ("Z", "X"):
                alive.add((pid, start))
    return alive


def _end(processes: set[tuple[int, int]]) -> None:
    """SIGTERM to each process, SIGKILL to those still running after :data:`GRACE_S`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in running(processes):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + GRACE_S
        while running(processes) and time.monotonic() < deadline:
            time.sleep(0.05)


def watch(fd: int, driver: int) -> None:
    """The watchdog: records the driver's Ray descendants every :data:`POLL_S` until ``fd``
    reads end-of-file (the driver died or closed it), then ends them all."""
    seen: set[tuple[int, int]] = set()
    while True:
        seen |= ray_descendants(driver)
        readable, _, _ = select.select([fd], [], [], POLL_S)
        if readable and not os.read(fd, 4096):
            break
    _end(seen)  # not a last scan: the driver's pid may already belong to another process


class LocalRay:
    """The watchdog of a Ray started by :func:`init_local_ray`; :meth:`stop` after
    ``ray.shutdown()`` lets it end whatever Ray left running and exit."""

    def __init__(self, process: subprocess.Popen | None, write_fd: int | None):
        self._process = process
        self._write_fd = write_fd

    def stop(self, timeout_s: float = 2 * GRACE_S + 5) -> None:
        """Closes the pipe (the watchdog ends the leftovers) and waits for the watchdog."""
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout_s)
            self._process = None


def init_local_ray(**init_kwargs: Any) -> LocalRay:
    """Starts a Ray node for this process (``ray.init`` without an address) that does not
    outlive it: no dashboard (unless ``init_kwargs`` asks for one), workers at the process's
    priority (``RAY_worker_niceness`` 0 unless set) and, on Linux, a watchdog that ends the
    node's processes once this process is gone, even after a SIGKILL.

    Returns:
        The watchdog; call :meth:`LocalRay.stop` after ``ray.shutdown()``.

    Raises:
        RayStartError: the node did not start (a socket path too long for ``AF_UNIX``, no
            space or permission in Ray's directory, a component that timed out); the message
            names the cause and where Ray keeps its files.
    """
    import ray

    # Evaluators and trials are the run's own work: at its priority, not at the niceness 15
    # Ray gives workers by default, which a machine busy with anything else starves. Read
    # when the node starts; the caller's record of process changes puts it back.
    os.environ.setdefault("RAY_worker_niceness", "0")
    try:
        ray.init(**{"include_dashboard": False, **init_kwargs})
    except Exception as exc:
        ray.shutdown()  # whatever part of the node did start
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        where = os.environ.get("RAY_TMPDIR") or "/tmp"
        raise RayStartError(
            f"Ray could not start a local node: {lines[0][:300]}; Ray keeps its sockets and "
            f"logs under {where}/ray: set RAY_TMPDIR to a short (its socket paths add about 70 "
            "characters to it), writable directory with free space"
        ) from exc
    if not PROC.joinpath("self", "stat").exists():
        return LocalRay(None, None)
    read_fd, write_fd = os.pipe()  # both ends are not inherited by Ray's own children
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", __file__, str(read_fd), str(os.getpid())],
            pass_fds=(read_fd,),
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the terminal's group must not end it first
        )
    finally:
        os.close(read_fd)
    return LocalRay(process, write_fd)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch(int(sys.argv[1]), int(sys.argv[2]))
