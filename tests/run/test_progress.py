"""The terminal progress: a live bar on a terminal only, one plain summary line per generation
on any stream, nothing when quiet."""

from __future__ import annotations

import io
import re

import pytest

from neuroevo.run.progress import ProgressBar


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def plain(text: str) -> str:
    """``text`` without terminal control sequences."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def test_live_bar_on_a_terminal_then_the_summary_line():
    stream, clock = Terminal(), FakeClock()
    bar = ProgressBar(stream, clock=clock)
    bar.start(generation=3, total_episodes=200)
    clock.now += 10
    bar.update(50, frames=100_000)
    bar._bar.refresh()  # what the bar's own thread does a few times per second
    drawn = plain(stream.getvalue())
    assert re.search(r"gen 3 .* 50/200 episodes  10,000 frames/s  ETA 0:30", drawn), drawn
    bar.summary_line("gen 3: best 21.0")
    assert stream.getvalue().endswith("\x1b[2Kgen 3: best 21.0\n")  # the bar is erased first
    bar.start(generation=4, total_episodes=10)
    bar.summary_line("gen 4: best 22.0")
    assert plain(stream.getvalue()).count("gen 4: best 22.0\n") == 1


@pytest.mark.parametrize(
    ("stream", "live", "quiet", "expected"),
    [
        (io.StringIO(), True, False, "summary\n"),  # not a terminal: summaries only
        (Terminal(), False, False, "summary\n"),  # logging.progress: false
        (Terminal(), True, True, ""),  # --quiet: nothing
    ],
)
def test_without_a_live_bar_only_summary_lines(stream, live, quiet, expected):
    bar = ProgressBar(stream, live=live, quiet=quiet)
    bar.start(0, 10)
    bar.update(5, 1000)
    bar.summary_line("summary")
    assert stream.getvalue() == expected
