"""``python -m neuroevo.plot SWEEP_DIR``: a sweep's figure.

One panel per swept hyperparameter (each trial's final metric against its value; a log axis
for a log range), and one of every trial's metric against frames. A PBT trial's curve includes
the history it copied at each exploit (its run directory continues the source's), and each
exploit is marked where it happened. Needs matplotlib (``pip install "neuroevo[plot]"``).
"""

from __future__ import annotations

from pathlib import Path

from neuroevo.sweeps.engine import SweepSpec
from neuroevo.sweeps.results import collect_results, read_lineage
from neuroevo.sweeps.trial import TRIALS_DIR, read_rows, row_metrics, trial_name

__all__ = ["is_sweep", "plot_sweep"]


def is_sweep(path: Path) -> bool:
    """Whether ``path`` is a sweep directory (rather than a run directory)."""
    return (path / "sweep.json").is_file()


def plot_sweep(sweep_dir: Path, output: Path) -> Path:
    """Writes the sweep's figure to ``output`` and returns it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = SweepSpec.load(sweep_dir)
    metric = spec.metric
    results = collect_results(sweep_dir, spec.trials, metric)
    keys = [k for k in spec.keys if k != "seed"]
    fig, axes = plt.subplots(
        1, len(keys) + 1, figsize=(4.5 * (len(keys) + 1), 4), constrained_layout=True
    )
    axes = list(axes) if keys else [axes]
    for axis, key in zip(axes, keys, strict=False):
        points = [
            (row[key], row[f"final_{metric}"]) for row in results if row["status"] != "failed"
        ]
        axis.scatter([p[0] for p in points], [p[1] for p in points], alpha=0.7)
        if key in spec.ranges and spec.ranges[key][2]:
            axis.set_xscale("log")
        axis.set_xlabel(key)
        axis.set_ylabel(f"final {metric}")
        axis.grid(alpha=0.3)
    curves = axes[-1]
    exploits = read_lineage(sweep_dir)
    for index in range(len(spec.trials)):
        name = trial_name(index)
        rows = read_rows(sweep_dir / TRIALS_DIR / name / "metrics.csv")
        if not rows:
            continue
        frames = [float(row["frames"]) for row in rows]
        values = [row_metrics(rows[: i + 1])[metric] for i in range(len(rows))]
        colour = f"C{index % 10}"
        curves.plot(frames, values, color=colour, label=name, linewidth=1)
        for row in (r for r in exploits if r["trial"] == name and r["generation"] <= len(rows)):
            at = row["generation"] - 1
            curves.plot(frames[at], values[at], "v", color=colour, markersize=7)
    curves.set_xlabel("frames")
    curves.set_ylabel(metric + (" (▼: PBT exploit)" if exploits else ""))
    curves.grid(alpha=0.3)
    if len(spec.trials) <= 12:
        curves.legend(fontsize="small")
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output
