"""Learning curves and archives of run directories, drawn with matplotlib (the ``plot``
extra): what ``python -m neuroevo.plot`` (:mod:`neuroevo.cli.plot`) writes.

:func:`plot_runs` draws best, mean and elite return against the run's frames and against wall
time, one colour per run, from each run's ``metrics.csv``; the frame axis is labelled by the
env kind in the run's ``config.yaml`` (Atari counts emulator frames, MuJoCo and gymnasium envs
count env steps). Short runs get markers, so a single generation shows as points.

:func:`plot_archives` gives each run a panel of its archive (read from its newest checkpoint),
drawn on the maze's walls, start and goal when the run's env is the maze: for the novelty
algorithms every archived 2-D behaviour (e.g. a robot's final (x, y)) as a dot coloured by the
generation it was added in; for MAP-Elites its 2-D grid, each filled cell coloured by its
elite's return, with the coverage, QD score and best return in the title.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import yaml

from neuroevo.run import checkpoints as checkpoint

CURVES = (("best", "-"), ("mean", ":"), ("elite_score", "--"))
# What metrics.csv's ``frames`` counts, by env kind (BatchedEnv.frames).
FRAME_LABELS = {
    "atari": "emulator frames",
    "mujoco": "env steps",
    "gym": "env steps",
    "maze": "env steps",
}
MARKED_POINTS = 50  # runs with fewer generations are drawn with markers
REQUIRED_COLUMNS = ("frames", "wall_time_s")  # the x axes


def env_of(run_dir: Path) -> tuple[str, str] | None:
    """``(env.kind, env.id)`` of the run's ``config.yaml``, or None if it cannot be read."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        return str(config["env"]["kind"]), str(config["env"]["id"])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None


def env_kind(run_dir: Path) -> str | None:
    """The ``env.kind`` of the run's ``config.yaml``, or None if it cannot be read."""
    env = env_of(run_dir)
    return None if env is None else env[0]


def optimizer_state(run_dir: Path) -> dict:
    """The optimizer state of the run's newest checkpoint."""
    found = checkpoint.latest_checkpoint(run_dir / "checkpoints", [])
    if found is None:
        raise FileNotFoundError(f"{run_dir} has no checkpoint to read an archive from")
    return found[1]["optimizer"]


def read_archive(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(behaviours [n, d], generation added [n])`` of the newest checkpoint's archive."""
    state = optimizer_state(run_dir)
    if "archive.behaviors" not in state:
        raise ValueError(
            f"{run_dir}: algorithm '{state.get('algorithm')}' keeps no archive "
            "(ns_es, nsr_es, nsra_es, ga_ns, map_elites, cma_me and cma_mae do)"
        )
    behaviors = np.asarray(state["archive.behaviors"], np.float64)
    return behaviors.reshape(len(behaviors), -1), np.asarray(state["archive.generations"])


def plot_archives(run_dirs: list[Path], output: Path) -> Path:
    """Writes a PNG with one panel per run: its archive of 2-D behaviours by generation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(len(run_dirs), 3)
    rows = math.ceil(len(run_dirs) / columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(4.6 * columns, 4.4 * rows), squeeze=False, constrained_layout=True
    )
    for axis, run_dir in zip(axes.flat, run_dirs, strict=False):
        if keeps_grid(optimizer_state(run_dir)):
            draw_grid_archive(fig, axis, run_dir)
            continue
        behaviors, generations = read_archive(run_dir)
        if behaviors.shape[1] != 2:
            raise ValueError(
                f"{run_dir}: archived behaviours have {behaviors.shape[1]} values; only 2-D "
                "behaviours (such as a final (x, y)) can be drawn"
            )
        env = env_of(run_dir)
        if env is not None and env[0] == "maze":
            draw_maze(axis, env[1])
        dots = axis.scatter(*behaviors.T, c=generations, cmap="viridis", s=8, zorder=3)
        fig.colorbar(dots, ax=axis, label="generation added")
        axis.set_title(f"{run_dir.name}: {len(behaviors)} archived", fontsize="medium")
        axis.set_aspect("equal")
    for axis in list(axes.flat)[len(run_dirs) :]:
        axis.set_visible(False)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output


def keeps_grid(state: dict) -> bool:
    """Whether the optimizer of checkpoint ``state`` keeps a grid archive (its params extend
    ``GridParams``: MAP-Elites, CMA-ME, CMA-MAE)."""
    from neuroevo.algorithms import ALGORITHMS
    from neuroevo.algorithms.map_elites import GridParams

    name = state.get("algorithm")
    if name not in ALGORITHMS:
        return False
    params = ALGORITHMS.params_class(name)
    return params is not None and issubclass(params, GridParams)


def draw_grid_archive(fig, axis, run_dir: Path) -> None:
    """A grid archive's run (MAP-Elites, CMA-ME, CMA-MAE) in 2-D: each filled cell coloured
    by its elite's return."""
    state = optimizer_state(run_dir)
    name = state["algorithm"]
    section = yaml.safe_load((run_dir / "config.yaml").read_text())["algorithm"][name]
    cells = tuple(section["cells"])
    if len(cells) != 2:
        raise ValueError(
            f"{run_dir}: the {name} grid has {len(cells)} dimensions; only 2-D grids are drawn"
        )
    (x0, y0), (x1, y1) = section["behavior_low"], section["behavior_high"]
    fitness = np.asarray(state["fitness"], np.float64).reshape(cells)
    env = env_of(run_dir)
    if env is not None and env[0] == "maze":
        draw_maze(axis, env[1])
    image = axis.imshow(
        np.ma.masked_invalid(fitness.T),
        extent=(x0, x1, y0, y1),
        origin="lower",
        cmap="viridis",
        alpha=0.85,
        zorder=1,
    )
    fig.colorbar(image, ax=axis, label="elite return")
    filled = np.isfinite(fitness)
    offset = float(section.get("qd_score_offset", 0.0))
    qd_score = float(np.sum(fitness[filled] - offset))
    best = float(fitness[filled].max()) if filled.any() else float("nan")
    axis.set_title(
        f"{run_dir.name}\ncoverage {filled.mean():.2f}, QD score {qd_score:.3g}, best {best:.3g}",
        fontsize="medium",
    )
    axis.set_aspect("equal")


def draw_maze(axis, maze_id: str) -> None:
    """Walls, start (triangle) and goal (star) of the maze ``maze_id``, y pointing down as in
    the original's pictures."""
    from neuroevo.envs.maze import maze_map

    maze = maze_map(maze_id)
    for x0, y0, x1, y1 in maze.walls:
        axis.plot([x0, x1], [y0, y1], color="black", linewidth=2, zorder=2)
    axis.plot(*maze.start, marker="^", color="tab:blue", markersize=10, zorder=4)
    axis.plot(*maze.goal, marker="*", color="tab:red", markersize=14, zorder=4)
    x_min, y_min, x_max, y_max = maze.bounds
    axis.set_xlim(x_min - 5, x_max + 5)
    axis.set_ylim(y_max + 5, y_min - 5)


def frames_label(run_dirs: list[Path]) -> str:
    """The x-axis label of the frames plot: one unit, or each run's when they differ."""
    labels = sorted({FRAME_LABELS.get(env_kind(d) or "atari", "frames") for d in run_dirs})
    return " / ".join(labels)


def read_metrics(run_dir: Path) -> dict[str, list[float]]:
    """Columns of ``run_dir/metrics.csv`` as float lists (blank and unreadable cells become
    NaN).

    Raises:
        FileNotFoundError: There is no ``metrics.csv``.
        ValueError: It is not a CSV file, has no rows, or lacks a column the plot needs.
    """
    path = run_dir / "metrics.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {run_dir} a neuroevo run directory?")
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except (csv.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a metrics CSV file ({exc})") from None
    if not rows:
        raise ValueError(f"{path} has no generations yet")
    missing = [column for column in REQUIRED_COLUMNS if column not in rows[0]]
    if missing:
        raise ValueError(
            f"{path} has no {' or '.join(map(repr, missing))} column: not a neuroevo metrics "
            f"file (its columns: {', '.join(map(str, rows[0]))[:200]})"
        )

    def number(text: str | None) -> float:
        try:
            return float(text) if text not in (None, "") else math.nan
        except (TypeError, ValueError):  # text, or a row's surplus cells (a list)
            return math.nan

    return {key: [number(row.get(key)) for row in rows] for key in rows[0] if key is not None}


def plot_runs(run_dirs: list[Path], output: Path) -> Path:
    """Writes a PNG with return vs frames (left) and vs wall time (right) for every run."""
    import matplotlib.pyplot as plt

    fig = draw_runs(run_dirs)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output


def draw_runs(run_dirs: list[Path]):
    """The figure of ``plot_runs`` (a ``matplotlib.figure.Figure``), not yet saved."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_frames, by_time) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    for run_index, run_dir in enumerate(run_dirs):
        metrics = read_metrics(run_dir)
        colour = f"C{run_index % 10}"
        hours = [seconds / 3600 for seconds in metrics["wall_time_s"]]
        marker = "o" if len(hours) < MARKED_POINTS else None
        for column, style in CURVES:
            if column not in metrics or all(math.isnan(v) for v in metrics[column]):
                continue
            label = f"{run_dir.name}: {column.replace('_score', '')}"
            options = {"color": colour, "label": label, "marker": marker, "markersize": 4}
            by_frames.plot(metrics["frames"], metrics[column], style, **options)
            by_time.plot(hours, metrics[column], style, **options)
    by_frames.set_xlabel(frames_label(run_dirs))
    by_time.set_xlabel("wall time (hours)")
    for axis in (by_frames, by_time):
        axis.set_ylabel("episode return")
        axis.grid(alpha=0.3)
    by_time.legend(fontsize="small", loc="best")
    return fig
