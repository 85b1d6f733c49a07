"""``python -m benchmarks compare``: every strategy on Hopper at one env-step budget, and
MAP-Elites beside NS-ES and GA-NS on the hard maze.

Hopper: each strategy's ``configs/*_hopper.yaml`` (the 2x64 tanh MLP; ES's config gets the same
network), ``--seeds`` seeds, ``--hopper-steps`` env steps each, one training run at a time in a
child process. The curve is the mean return of the distribution's mean / ES centre (the
``elite_score`` of ``metrics.csv``) against env steps and against wall time, mean and range over
seeds. xNES is left out: at P ~ 5k weights it keeps dense P x P matrices and takes an O(P^3)
matrix exponential every generation.

Maze: ``configs/map_elites_maze.yaml``, ``maze_ns_es.yaml``, ``maze_ga_ns.yaml`` at
``--maze-steps`` env steps (or until a robot reaches the goal), the same seeds. Reported: the
share of a 20 x 20 grid over the maze holding a behaviour the method kept (MAP-Elites' elites,
the novelty archives' behaviours), whether the goal's cell is among them, and whether a robot
reached the goal (best return >= -5).

Writes the JSON (``--json``), the curves (``--plot``) and the tables into ``--markdown``
between the ``<!-- compare:begin -->`` / ``<!-- compare:end -->`` markers.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import REPO_ROOT, print_table, write_json

HOPPER = {
    "es": ("es_hopper.yaml", ["model.mlp.hidden_sizes=[64, 64]", "budget.hours=null"]),
    "pgpe": ("pgpe_hopper.yaml", []),
    "snes": ("snes_hopper.yaml", []),
    "sep_cma_es": ("sepcma_hopper.yaml", []),
    "cem": ("cem_hopper.yaml", []),
    "cma_es": ("cmaes_hopper.yaml", []),
    "lm_ma_es": (  # sep-CMA-ES's config and settings, with LM-MA-ES's own constants
        "sepcma_hopper.yaml",
        [
            "algorithm.name=lm_ma_es",
            "algorithm.lm_ma_es.population_size=100",
            "algorithm.lm_ma_es.sigma=0.05",
            "algorithm.lm_ma_es.action_noise_std=0.01",
        ],
    ),
}
MAZE = {
    "map_elites": "map_elites_maze.yaml",
    "ns_es": "maze_ns_es.yaml",
    "ga_ns": "maze_ga_ns.yaml",
}
GRID = 20  # cells per side of the maze grid the coverage is counted on
MARKERS = ("<!-- compare:begin -->", "<!-- compare:end -->")


def train(config: str, seed: int, steps: int, run_dir: Path, overrides: list[str]) -> float:
    """Trains one run in a child process; returns its wall time in seconds. A run that
    finished before (its ``DONE`` file holds the seconds) is not trained again, so an
    interrupted benchmark, or one split over processes, is completed by running it again."""
    done_file = run_dir / "DONE"
    if done_file.exists():
        return float(done_file.read_text())
    if run_dir.exists():  # an interrupted run: start it over
        shutil.rmtree(run_dir)
    sets = [*overrides, f"seed={seed}", f"budget.frames={steps}", "logging.tensorboard=false"]
    command = [
        sys.executable,
        "-m",
        "neuroevo.train",
        "--config",
        str(REPO_ROOT / "configs" / config),
    ]
    command += [arg for item in sets for arg in ("--set", item)]
    command += ["--run-dir", str(run_dir), "--quiet"]
    start = time.time()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{config} seed {seed} failed:\n{done.stderr[-3000:]}")
    seconds = time.time() - start
    done_file.write_text(f"{seconds}\n")
    return seconds


def read_curve(run_dir: Path) -> dict[str, list[float]]:
    """frames, wall time, elite score and best of every generation in ``metrics.csv``."""
    with (run_dir / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))

    def column(name: str) -> list[float]:
        return [float(r[name]) if r.get(name) not in (None, "") else math.nan for r in rows]

    return {
        "frames": column("frames"),
        "wall_s": column("wall_time_s"),
        "elite": column("elite_score"),
        "best": column("best"),
    }


def maze_cells(points: np.ndarray) -> set[tuple[int, int]]:
    """The 20 x 20 cells over the maze's bounds holding one of the (x, y) ``points``."""
    from neuroevo.envs.maze import maze_map

    x0, y0, x1, y1 = maze_map("hard").bounds
    scaled = (np.asarray(points, np.float64).reshape(-1, 2) - [x0, y0]) / [x1 - x0, y1 - y0]
    cells = np.clip(np.floor(scaled * GRID).astype(int), 0, GRID - 1)
    return {(int(a), int(b)) for a, b in cells}


def maze_result(name: str, run_dir: Path) -> dict[str, Any]:
    """Coverage, goal cell and goal reached of one maze run, from its newest checkpoint."""
    from neuroevo.envs.maze import maze_map
    from neuroevo.run import checkpoints as checkpoint

    _, state = checkpoint.latest_checkpoint(run_dir / "checkpoints", [])
    optimizer = state["optimizer"]
    if name == "map_elites":
        filled = ~np.isnan(np.asarray(optimizer["fitness"]))
        points = np.asarray(optimizer["behaviors"])[filled]
    else:
        points = np.asarray(optimizer["archive.behaviors"])
    cells = maze_cells(points)
    goal = next(iter(maze_cells(np.array(maze_map("hard").goal))))
    curve = read_curve(run_dir)
    return {
        "coverage": len(cells) / GRID**2,
        "goal_cell_filled": goal in cells,
        "goal_reached": bool(np.nanmax(curve["best"]) >= -5.0),
        "best": float(np.nanmax(curve["best"])),
        "env_steps": int(curve["frames"][-1]),
        "kept_behaviors": len(points),
    }


def summarise(curves: list[dict[str, list[float]]], steps: int) -> dict[str, Any]:
    """Mean and range over seeds of the elite score on a common grid of env steps."""
    grid = np.linspace(0, steps, 21)[1:]
    table = []
    for curve in curves:
        frames, elite = np.asarray(curve["frames"]), np.asarray(curve["elite"])
        ok = np.isfinite(elite)
        table.append(np.interp(grid, frames[ok], elite[ok], left=np.nan))
    values = np.asarray(table)
    return {
        "steps": grid.tolist(),
        "mean": np.nanmean(values, axis=0).tolist(),
        "min": np.nanmin(values, axis=0).tolist(),
        "max": np.nanmax(values, axis=0).tolist(),
        "final": [float(np.asarray(c["elite"])[-1]) for c in curves],
        "best_elite": [float(np.nanmax(c["elite"])) for c in curves],
        "wall_s": [float(c["wall_s"][-1]) for c in curves],
        "generations": [len(c["frames"]) for c in curves],
    }


def plot(hopper: dict[str, Any], output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_steps, by_time) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    for index, (name, result) in enumerate(hopper.items()):
        colour = f"C{index}"
        summary = result["summary"]
        by_steps.plot(summary["steps"], summary["mean"], color=colour, label=name)
        by_steps.fill_between(
            summary["steps"], summary["min"], summary["max"], color=colour, alpha=0.15
        )
        for k, curve in enumerate(result["curves"]):
            minutes = np.asarray(curve["wall_s"]) / 60
            by_time.plot(
                minutes, curve["elite"], color=colour, alpha=0.7, label=name if k == 0 else None
            )
    by_steps.set_xlabel("env steps")
    by_time.set_xlabel("wall time (minutes, shared 2-core machine)")
    for axis in (by_steps, by_time):
        axis.set_ylabel("return of the mean / centre")
        axis.grid(alpha=0.3)
    by_steps.set_title("mean and range over seeds")
    by_time.set_title("each seed")
    by_steps.legend(fontsize="small")
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    print(f"wrote {output}")


def markdown(payload: dict[str, Any], image: str) -> str:
    """The tables of the measured numbers (the text around them is written by hand)."""
    lines = [
        f"Measured by `python -m benchmarks compare --hopper-steps {payload['hopper_steps']} "
        f"--maze-steps {payload['maze_steps']} --seeds {len(payload['seeds'])}` on "
        f"{payload['machine']['time'][:10]} ({payload['machine']['cpu_count']} shared cores).",
        "",
        f"![Hopper curves]({image})",
        "",
        "| Hopper, 2x64 tanh | final return (mean of seeds) | best return of the mean (per seed) "
        "| generations | wall time (min, per seed) |",
        "|---|---|---|---|---|",
    ]
    for name, result in payload["hopper"].items():
        s = result["summary"]
        lines.append(
            f"| {name} | {np.mean(s['final']):.0f} | "
            + ", ".join(f"{v:.0f}" for v in s["best_elite"])
            + f" | {', '.join(map(str, s['generations']))} | "
            + ", ".join(f"{v / 60:.1f}" for v in s["wall_s"])
            + " |"
        )
    lines += [
        "",
        "| hard maze | coverage of the 20 x 20 grid (per seed) | goal cell filled | robot reached "
        "the goal | env steps (per seed) |",
        "|---|---|---|---|---|",
    ]
    for name, runs in payload["maze"].items():
        coverage = ", ".join(f"{r['coverage']:.2f}" for r in runs)
        steps = ", ".join(f"{r['env_steps'] / 1e6:.1f}M" for r in runs)
        filled = sum(r["goal_cell_filled"] for r in runs)
        reached = sum(r["goal_reached"] for r in runs)
        lines.append(
            f"| {name} | {coverage} | {filled}/{len(runs)} | {reached}/{len(runs)} | {steps} |"
        )
    return "\n".join(lines)


def write_markdown(path: Path, table: str) -> None:
    text = path.read_text() if path.exists() else f"{MARKERS[0]}\n{MARKERS[1]}\n"
    start, end = text.index(MARKERS[0]) + len(MARKERS[0]), text.index(MARKERS[1])
    path.write_text(text[:start] + "\n" + table + "\n" + text[end:])
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks compare", description=__doc__)
    parser.add_argument("--hopper-steps", type=int, default=300_000)
    parser.add_argument("--maze-steps", type=int, default=3_000_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--strategies", default=",".join(HOPPER), help="Hopper strategies")
    parser.add_argument("--maze", default=",".join(MAZE), help="maze methods ('' skips)")
    parser.add_argument("--runs", type=Path, default=Path("bench_results/compare_runs"))
    parser.add_argument("--json", type=Path, default=Path("bench_results/compare.json"))
    parser.add_argument(
        "--plot", type=Path, default=REPO_ROOT / "docs/images/strategies_hopper.png"
    )
    parser.add_argument("--markdown", type=Path, default=REPO_ROOT / "docs/STRATEGIES.md")
    args = parser.parse_args(argv)
    seeds = list(range(args.seeds))
    maze: dict[str, list[dict[str, Any]]] = {}
    for name in filter(None, args.maze.split(",")):
        maze[name] = []
        for seed in seeds:
            run_dir = args.runs / f"maze-{name}-{seed}"
            seconds = train(MAZE[name], seed, args.maze_steps, run_dir, [])
            maze[name].append(maze_result(name, run_dir) | {"wall_s": seconds})
            print(name, seed, maze[name][-1], flush=True)
    hopper: dict[str, Any] = {}
    for name in filter(None, args.strategies.split(",")):
        config, overrides = HOPPER[name]
        curves = []
        for seed in seeds:
            run_dir = args.runs / f"hopper-{name}-{seed}"
            train(config, seed, args.hopper_steps, run_dir, overrides)
            curves.append(read_curve(run_dir))
            print(name, seed, "final", curves[-1]["elite"][-1], flush=True)
        hopper[name] = {"curves": curves, "summary": summarise(curves, args.hopper_steps)}
    rows = [
        [
            n,
            np.mean(r["summary"]["final"]),
            max(r["summary"]["best_elite"]),
            np.mean(r["summary"]["wall_s"]),
        ]
        for n, r in hopper.items()
    ]
    print_table("Hopper", ["strategy", "final return", "best", "wall s"], rows)
    payload = {
        "hopper_steps": args.hopper_steps,
        "maze_steps": args.maze_steps,
        "seeds": seeds,
        "hopper": hopper,
        "maze": maze,
    }
    path = write_json(args.json, payload)
    import json

    payload = json.loads(path.read_text())
    if hopper:
        plot(hopper, args.plot)
    image = os.path.relpath(args.plot, args.markdown.parent)
    write_markdown(args.markdown, markdown(payload, image))
    return 0
