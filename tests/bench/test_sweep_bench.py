"""``python -m benchmarks sweep``: the rate of trials measured only while they all train
(no timing: made-up reports, the window worked out by hand)."""

from __future__ import annotations

import pytest

from benchmarks import sweep as bench
from neuroevo.sweeps.results import read_timeline
from neuroevo.sweeps.trial import TIMELINE_COLUMNS


def test_only_the_time_all_trials_train_together_counts() -> None:
    # Trial a reports at t = 10, 20, 30, 40 (100 steps/s); trial b starts later and reports at
    # t = 25, 35, 45 (50 steps/s). Together from t = 25 (b's first report) to t = 40 (a's last):
    # a runs 1,500 steps, b 750, in 15 s.
    a = [(10.0, 0.0), (20.0, 1000.0), (30.0, 2000.0), (40.0, 3000.0)]
    b = [(25.0, 0.0), (35.0, 500.0), (45.0, 1000.0)]
    measured = bench.concurrent_rate([a, b])
    assert measured["rate"] == pytest.approx(2250.0 / 15.0)
    assert measured["window_s"] == pytest.approx(15.0)
    assert measured["overlap"] == pytest.approx(15.0 / 30.0)
    # One trial: its rate between its first and last report (the first generation traces).
    assert bench.concurrent_rate([a])["rate"] == pytest.approx(100.0)


def test_trials_that_never_overlap_are_an_error() -> None:
    a = [(0.0, 0.0), (10.0, 1000.0)]
    b = [(20.0, 0.0), (30.0, 1000.0)]
    with pytest.raises(RuntimeError, match="never trained at the same time"):
        bench.concurrent_rate([a, b])


def test_the_timeline_is_read_per_trial(tmp_path) -> None:
    rows = ["trial-000,0,10,1.5", "trial-001,0,5,2.0", "trial-000,1,30,2.5"]
    (tmp_path / "timeline.csv").write_text("\n".join([",".join(TIMELINE_COLUMNS), *rows]) + "\n")
    assert list(read_timeline(tmp_path).values()) == [[(1.5, 10.0), (2.5, 30.0)], [(2.0, 5.0)]]
    # A sweep started before the timeline existed and resumed since: rows, no header.
    (tmp_path / "timeline.csv").write_text("\n".join(rows) + "\n")
    assert list(read_timeline(tmp_path).values()) == [[(1.5, 10.0), (2.5, 30.0)], [(2.0, 5.0)]]
