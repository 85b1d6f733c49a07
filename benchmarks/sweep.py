"""``python -m benchmarks sweep``: N trials of a sweep on one machine against one run using
every core (issue #44: their env steps/s must add up to at least 90% of the one run's).

In one invocation, on this machine's CPUs (its affinity: ``taskset`` narrows it): a sweep of one
trial (its evaluator and TensorFlow threads sized to every CPU) is the baseline, then a sweep
of N identical trials in parallel for each N of ``--trials`` (each sized to its share), all
through ``ne.sweep`` with the same config and generations. A trial's rate is its env steps
over its own training time after its first generation (which traces the graphs), from its
``metrics.csv``; N trials' aggregate is the sum of their rates (they start together and run the
same budget, so they overlap). The baseline is measured before and after the parallel sweeps
and averaged (the machine's speed drifts).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import print_table, write_json
from neuroevo.sweeps.engine import available_cpus
from neuroevo.sweeps.trial import TRIALS_DIR, read_rows

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks sweep", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--config", default=str(REPO / "configs" / "es_hopper.yaml"))
    parser.add_argument("--generations", type=int, default=6, help="per trial")
    parser.add_argument("--trials", default="2,4", help="trials in parallel, comma-separated")
    parser.add_argument("--json", default="bench_results/sweep.json")
    return parser.parse_args(argv)


def trial_rate(run_dir: Path) -> float:
    """Env steps (``frames``) per second of a trial's training after its first generation."""
    rows = read_rows(run_dir / "metrics.csv")
    frames = [float(r["frames"]) for r in rows]
    seconds = [float(r["wall_time_s"]) for r in rows]
    return (frames[-1] - frames[0]) / (seconds[-1] - seconds[0])


def measure(config: str, generations: int, trials: int, cpus: int) -> dict[str, Any]:
    """Aggregate env steps/s of ``trials`` identical trials run in parallel."""
    import neuroevo as ne

    with tempfile.TemporaryDirectory(prefix="neuroevo-bench-sweep-") as directory:
        sweep_dir = Path(directory) / "sweep"
        overrides = {
            "budget.hours": None,
            "budget.generations": generations,
            "logging.tensorboard": False,
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
        rates = [trial_rate(p) for p in sorted((sweep_dir / TRIALS_DIR).iterdir())]
    return {"trials": trials, "threads_per_trial": max(1, cpus // trials), "rates": rates}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cpus = available_cpus()
    counts = [int(n) for n in args.trials.split(",")]
    before = measure(args.config, args.generations, 1, cpus)
    parallel = [measure(args.config, args.generations, n, cpus) for n in counts]
    after = measure(args.config, args.generations, 1, cpus)
    baseline = (before["rates"][0] + after["rates"][0]) / 2
    rows = [
        [
            "1 (baseline, before / after)",
            f"{before['rates'][0]:,.0f} / {after['rates'][0]:,.0f}",
            1.0,
        ]
    ]
    for run in parallel:
        total = sum(run["rates"])
        run["ratio"] = total / baseline
        rows.append([f"{run['trials']} in parallel", f"{total:,.0f}", run["ratio"]])
    print_table(
        f"sweep throughput, {args.config}, {args.generations} generations, {cpus} CPUs",
        ["trials", "env steps/s (sum)", "vs one run"],
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
