"""``python -m benchmarks sweep``: N trials of a sweep on one machine against one run using
every core (issue #44: their env steps/s must add up to at least 90% of the one run's).

In one invocation, on this machine's CPUs (its affinity: ``taskset`` narrows it): a sweep of one
trial (its evaluator and TensorFlow threads sized to every CPU) is the baseline, then a sweep
of N identical trials in parallel for each N of ``--trials`` (each sized to its share), all
through ``ne.sweep`` with the same config and generations. The rate of a sweep is measured
only while all its trials train at once: from the moment the last of them finished its first
generation (which traces the graphs) to the moment the first of them finished its last, the
env steps every trial ran in that window (from the sweep's ``timeline.csv``: each trial's env
steps and clock time after every generation) over the window's length. Trials that start or
end apart are thus never counted as if they had shared the machine. The baseline is measured
before and after the parallel sweeps and averaged (the machine's speed drifts).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import print_table, write_json
from neuroevo.sweeps.engine import available_cpus
from neuroevo.sweeps.results import read_timeline

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks sweep", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--config", default=str(REPO / "configs" / "es_hopper.yaml"))
    parser.add_argument(
        "--generations", type=int, default=60, help="per trial (Hopper: windows of 40 s or more)"
    )
    parser.add_argument("--trials", default="2,4", help="trials in parallel, comma-separated")
    parser.add_argument("--json", default="bench_results/sweep.json")
    return parser.parse_args(argv)


Progress = list[tuple[float, float]]
"""One trial's (clock time in s, env steps so far) after each generation."""


def concurrent_rate(trials: list[Progress]) -> dict[str, float]:
    """Env steps per second of ``trials`` together while all of them trained at once: from the
    last first report to the first last report, each trial's steps interpolated linearly
    between its reports. ``overlap`` is that window over the longest trial's own span."""
    start = max(points[0][0] for points in trials)
    end = min(points[-1][0] for points in trials)
    if end <= start:
        raise RuntimeError(
            "the trials never trained at the same time (each one's first generation ended "
            "after another's last): raise --generations"
        )
    steps = 0.0
    for points in trials:
        times, frames = zip(*points, strict=True)
        steps += float(np.interp(end, times, frames) - np.interp(start, times, frames))
    span = max(points[-1][0] - points[0][0] for points in trials)
    return {"rate": steps / (end - start), "window_s": end - start, "overlap": (end - start) / span}


def measure(config: str, generations: int, trials: int, cpus: int) -> dict[str, Any]:
    """Aggregate env steps/s of ``trials`` identical trials run in parallel."""
    import neuroevo as ne

    with tempfile.TemporaryDirectory(prefix="neuroevo-bench-sweep-") as directory:
        sweep_dir = Path(directory) / "sweep"
        overrides = {
            "budget.hours": None,
            "budget.generations": generations,
            "logging.tensorboard": False,
            "evaluator.workers": None,  # each trial sized to its share of the CPUs
        }
        result = ne.sweep(
            config,
            sweep_dir,
            overrides=overrides,
            grid={"seed": [0] * trials},
            trials_in_parallel=trials,
        )
        failed = [row["reason"] for row in result.results if row["status"] != "finished"]
        if failed:
            raise RuntimeError(f"a trial did not finish: {failed}")
        measured = concurrent_rate(list(read_timeline(sweep_dir).values()))
    return {"trials": trials, "threads_per_trial": max(1, cpus // trials), **measured}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cpus = available_cpus()
    counts = [int(n) for n in args.trials.split(",")]
    before = measure(args.config, args.generations, 1, cpus)
    parallel = [measure(args.config, args.generations, n, cpus) for n in counts]
    after = measure(args.config, args.generations, 1, cpus)
    baseline = (before["rate"] + after["rate"]) / 2
    rows = [
        [
            "1 (baseline, before / after)",
            f"{before['rate']:,.0f} / {after['rate']:,.0f}",
            1.0,
            f"{before['window_s']:.0f} / {after['window_s']:.0f}",
        ]
    ]
    for run in parallel:
        run["ratio"] = run["rate"] / baseline
        window = f"{run['window_s']:.0f} ({run['overlap']:.0%} of the longest trial)"
        rows.append([f"{run['trials']} in parallel", f"{run['rate']:,.0f}", run["ratio"], window])
    print_table(
        f"sweep throughput, {args.config}, {args.generations} generations, {cpus} CPUs",
        ["trials", "env steps/s (all trials)", "vs one run", "window s"],
        rows,
    )
    write_json(
        args.json,
        {
            "config": args.config,
            "generations": args.generations,
            "cpus": cpus,
            "baseline": {"before": before, "after": after, "mean": baseline},
            "parallel": parallel,
            "target_ratio": 0.9,
        },
    )
    return 0
