"""``python -m neuroevo.plot RUN_DIR [RUN_DIR ...] -o curves.png``: learning curves;
``--archive``: the novelty archive of 2-D behaviours; a sweep directory: its figure
(:mod:`neuroevo.sweeps.plot`).

Draws best, mean and elite return against the run's frames and against wall time, one colour
per run, from each run's ``metrics.csv``; the frame axis is labelled by the env kind in the
run's ``config.yaml`` (Atari counts emulator frames, MuJoCo and gymnasium envs count env steps).
Short runs get markers, so a single generation shows as points.

With ``--archive`` each run gets a panel of its archive (read from its newest checkpoint),
drawn on the maze's walls, start and goal when the run's env is the maze: for the novelty
algorithms every archived 2-D behaviour (e.g. a robot's final (x, y)) as a dot coloured by the
generation it was added in; for MAP-Elites its 2-D grid, each filled cell coloured by its
elite's return, with the coverage, QD score and best return in the title. Needs matplotlib
(``pip install "neuroevo[plot]"``).
"""

from __future__ import annotations

from pathlib import Path

from neuroevo.cli.common import Parser, output_file, quiet_tensorflow_start_up, run_command
from neuroevo.core.extras import require
from neuroevo.run.plots import plot_archives, plot_runs

IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")


def main(argv: list[str] | None = None) -> int:
    quiet_tensorflow_start_up()  # the maze's archive plot imports it
    parser = Parser(prog="python -m neuroevo.plot", description=__doc__)
    parser.add_argument("run_dirs", nargs="+", type=Path, help="one or more run directories")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("curves.png"),
        help="image to write (.png, .pdf, .svg, .jpg; default curves.png); in an existing "
        "directory: DIR/curves.png (DIR/archive.png with --archive)",
    )
    parser.add_argument(
        "--archive",
        action="store_true",
        help="draw each run's archive (novelty archive or MAP-Elites grid) instead of its curves",
    )
    args = parser.parse_args(argv)
    return run_command(lambda: _plot(args.run_dirs, args.output, args.archive))


def _plot(run_dirs: list[Path], output: Path, archive: bool) -> int:
    require("plot", "python -m neuroevo.plot")
    from neuroevo.sweeps.plot import is_sweep, plot_sweep

    if len(run_dirs) == 1 and is_sweep(run_dirs[0]) and not archive:
        output = output_file(output, "-o", IMAGE_SUFFIXES, "sweep.png")
        print(f"wrote {plot_sweep(run_dirs[0], output)}")
        return 0
    default_name = "archive.png" if archive else "curves.png"
    output = output_file(output, "-o", IMAGE_SUFFIXES, default_name)
    draw = plot_archives if archive else plot_runs
    print(f"wrote {draw(run_dirs, output)}")
    return 0
