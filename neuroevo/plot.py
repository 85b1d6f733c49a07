"""``python -m neuroevo.plot RUN_DIR [RUN_DIR ...] -o curves.png``: learning curves.

Draws best, mean and elite return against the run's frames and against wall time, one colour
per run, from each run's ``metrics.csv``; the frame axis is labelled by the env kind in the
run's ``config.yaml`` (Atari counts emulator frames, MuJoCo and gymnasium envs count env steps).
Short runs get markers, so a single generation shows as points. Needs matplotlib
(``pip install "neuroevo[plot]"``).
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import yaml

from neuroevo.cli import Parser, run_command
from neuroevo.extras import require

CURVES = (("best", "-"), ("mean", ":"), ("elite_score", "--"))
# What metrics.csv's ``frames`` counts, by env kind (BatchedEnv.frames).
FRAME_LABELS = {"atari": "emulator frames", "mujoco": "env steps", "gym": "env steps"}
MARKED_POINTS = 50  # runs with fewer generations are drawn with markers


def env_kind(run_dir: Path) -> str | None:
    """The ``env.kind`` of the run's ``config.yaml``, or None if it cannot be read."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        return str(config["env"]["kind"])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None


def frames_label(run_dirs: list[Path]) -> str:
    """The x-axis label of the frames plot: one unit, or each run's when they differ."""
    labels = sorted({FRAME_LABELS.get(env_kind(d) or "atari", "frames") for d in run_dirs})
    return " / ".join(labels)


def read_metrics(run_dir: Path) -> dict[str, list[float]]:
    """Columns of ``run_dir/metrics.csv`` as float lists (blank cells become NaN)."""
    path = run_dir / "metrics.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {run_dir} a neuroevo run directory?")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise ValueError(f"{path} has no generations yet")

    def number(text: str | None) -> float:
        try:
            return float(text) if text not in (None, "") else math.nan
        except ValueError:
            return math.nan

    return {key: [number(row.get(key)) for row in rows] for key in rows[0]}


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


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m neuroevo.plot", description=__doc__)
    parser.add_argument("run_dirs", nargs="+", type=Path, help="one or more run directories")
    parser.add_argument("-o", "--output", type=Path, default=Path("curves.png"))
    args = parser.parse_args(argv)
    return run_command(lambda: _plot(args.run_dirs, args.output))


def _plot(run_dirs: list[Path], output: Path) -> int:
    require("plot", "python -m neuroevo.plot")
    print(f"wrote {plot_runs(run_dirs, output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
