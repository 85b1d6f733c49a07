"""The deceptive-maze comparison of docs/NOVELTY.md: novelty search against reward-only search.

    python examples/maze_comparison.py runs/maze            # train what is missing, then report
    python examples/maze_comparison.py runs/maze --report   # report on the runs already there

Trains ``configs/maze_<algorithm>.yaml`` for every algorithm and seed into
``RUNS/<algorithm>-s<seed>`` (an existing finished run is kept; an unfinished one is resumed),
then prints a Markdown table (did any evaluated robot reach the goal, after how many env
steps, how close each run came) and draws the closest distance so far against env steps
(``maze_curves.png``) and the novelty archives (``maze_archives.png``: a row per novelty
algorithm, a column per seed).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

from neuroevo.config.schema import load_config
from neuroevo.run.plots import plot_archives, read_metrics

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ("ns_es", "nsr_es", "ga_ns", "es", "ga")
NOVELTY = ("ns_es", "nsr_es", "ga_ns")
TRAP_DISTANCE = 38.9  # the dead end below the goal, where the reward leads (docs/MAZE.md)


def train(run_dir: Path, algorithm: str, seed: int) -> None:
    """Trains one run, resuming it if it was stopped part-way."""
    command = [sys.executable, "-m", "neuroevo.train", "--quiet"]
    if (run_dir / "checkpoints").exists():
        command += ["--resume", str(run_dir)]
    else:
        config = ROOT / "configs" / f"maze_{algorithm}.yaml"
        command += ["--config", str(config), "--set", f"seed={seed}", "--run-dir", str(run_dir)]
    subprocess.run(command, check=True)


def best_returns(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(env steps, best return of the generation)`` per generation of ``metrics.csv``."""
    metrics = read_metrics(run_dir)
    return np.array(metrics["frames"]), np.array(metrics["best"])


def goal_radius(run_dir: Path) -> float:
    """The run's ``env.maze.goal_radius``: a return (minus the final distance) of at least
    minus this is a robot that reached the goal."""
    return load_config(run_dir / "config.yaml").env.options.goal_radius


def summary_row(run_dir: Path, algorithm: str, seed: int) -> str:
    frames, best = best_returns(run_dir)
    reached = np.flatnonzero(best >= -goal_radius(run_dir))
    if reached.size:
        first = int(reached[0])
        outcome = f"yes, generation {first} ({frames[first] / 1e6:.1f}M steps)"
    else:
        outcome = "no"
    closest = -best.max()
    return (
        f"| `{algorithm}` | {seed} | {outcome} | {closest:.1f} | {len(best)} | "
        f"{frames[-1] / 1e6:.1f}M |"
    )


def plot_curves(runs: dict[tuple[str, int], Path], output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.5))
    colours = dict(zip(ALGORITHMS, plt.get_cmap("tab10").colors, strict=False))
    for (algorithm, seed), run_dir in runs.items():
        frames, best = best_returns(run_dir)
        closest = -np.maximum.accumulate(best)
        label = algorithm if seed == min(s for a, s in runs if a == algorithm) else None
        axis.plot(frames / 1e6, closest, color=colours[algorithm], label=label, lw=1.2)
    radius = goal_radius(next(iter(runs.values())))
    axis.axhline(radius, color="k", ls=":", lw=0.8)
    axis.text(0, radius * 0.9, "goal radius", va="top", fontsize="small")
    axis.text(0, TRAP_DISTANCE * 1.05, "the trap's dead end", va="bottom", fontsize="small")
    axis.set_xlabel("env steps (millions)")
    axis.set_ylabel("closest final distance to the goal so far")
    axis.set_yscale("log")
    axis.legend()
    figure.tight_layout()
    figure.savefig(output, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path, help="directory of the runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--report", action="store_true", help="do not train, only report")
    args = parser.parse_args(argv)
    runs = {(a, s): args.runs / f"{a}-s{s}" for a in ALGORITHMS for s in args.seeds}
    if not args.report:
        for (algorithm, seed), run_dir in runs.items():
            train(run_dir, algorithm, seed)
    runs = {key: path for key, path in runs.items() if (path / "metrics.csv").exists()}
    print("| algorithm | seed | reached the goal | closest distance | generations | env steps |")
    print("|---|---|---|---|---|---|")
    for (algorithm, seed), run_dir in runs.items():
        print(summary_row(run_dir, algorithm, seed))
    plot_curves(runs, args.runs / "maze_curves.png")
    archived = [runs[a, s] for a in NOVELTY for s in args.seeds if (a, s) in runs]
    if archived:
        plot_archives(archived, args.runs / "maze_archives.png")
    print(f"figures: {args.runs / 'maze_curves.png'}, {args.runs / 'maze_archives.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
