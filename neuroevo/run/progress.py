"""The terminal progress of a training run: a live bar during a generation, one summary line
after it.

The live bar (episodes done/total, frames/s, time left) is drawn by ``rich`` and only on a
terminal: in a log file it would be noise. Summary lines are written as plain text on any
stream, so a log holds exactly one line per generation.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
)

__all__ = ["ProgressBar"]


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressBar:
    """A live bar during a generation and one summary line after it.

    Args:
        stream: Where to write; defaults to ``sys.stderr``.
        live: Whether to draw the live bar at all (``logging.progress``).
        quiet: Write nothing, not even summary lines (``--quiet``).
        clock: Seconds since some fixed point, for the frame rate; injectable for tests.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        live: bool = True,
        quiet: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = sys.stderr if stream is None else stream
        self._quiet = quiet
        self._clock = clock
        self._console = Console(file=self._stream, stderr=stream is None)
        self._live = live and not quiet and self._console.is_terminal
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._start = 0.0
        self._total = 0

    def start(self, generation: int, total_episodes: int) -> None:
        """Starts the bar of a generation that will run ``total_episodes`` episodes."""
        self._stop()
        if not self._live:
            return
        self._bar = Progress(
            TextColumn("gen {task.fields[generation]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("episodes  {task.fields[rate]:,.0f} frames/s  ETA {task.fields[eta]}"),
            console=self._console,
            transient=True,
        )
        self._task = self._bar.add_task(
            "", total=total_episodes, generation=generation, rate=0.0, eta="?"
        )
        self._start, self._total = self._clock(), total_episodes
        self._bar.start()

    def update(self, episodes_done: int, frames: int) -> None:
        """Moves the bar to ``episodes_done`` episodes and ``frames`` frames played so far in
        this generation (the bar redraws itself a few times per second)."""
        if self._bar is None or self._task is None:
            return
        elapsed = self._clock() - self._start
        rate = frames / elapsed if elapsed > 0 else 0.0
        left = self._total - episodes_done
        eta = _duration(elapsed * left / episodes_done) if episodes_done else "?"
        self._bar.update(self._task, completed=episodes_done, rate=rate, eta=eta)

    def summary_line(self, text: str) -> None:
        """Removes the live bar and writes ``text`` on a line of its own (unless quiet)."""
        self._stop()
        if self._quiet:
            return
        self._stream.write(text + "\n")
        self._stream.flush()

    def _stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = self._task = None
