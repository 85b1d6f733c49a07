"""A sweep's results: ``SWEEP/results.csv`` (one row per trial) and the table of the best
configurations (mean ± std over seeds), read from the trials' run directories and status
files, so they are the same whether the sweep ran at once or was resumed."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from neuroevo.sweeps.trial import (
    LINEAGE,
    LINEAGE_COLUMNS,
    TIMELINE,
    TIMELINE_COLUMNS,
    TRIALS_DIR,
    read_rows,
    read_status,
    row_metrics,
    trial_name,
)

__all__ = [
    "RESULTS_FILE",
    "best_table",
    "collect_results",
    "read_lineage",
    "read_timeline",
    "write_results",
]

RESULTS_FILE = "results.csv"
STATUSES = ("finished", "stopped", "failed", "not run")
"""``stopped``: ended early by the scheduler (ASHA, or a PBT trial it paused for good)."""


def _appended_rows(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    """The rows trials appended to one of the sweep's CSV files (none when it does not exist),
    its header skipped wherever it is (a sweep started before the file existed has none)."""
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        return [
            dict(zip(columns, record, strict=True))
            for record in csv.reader(handle)
            if tuple(record) != columns
        ]


def read_timeline(sweep_dir: Path) -> dict[str, list[tuple[float, float]]]:
    """Each trial's (clock time, env steps so far) after every generation it reported, in the
    order reported."""
    timeline: dict[str, list[tuple[float, float]]] = {}
    for row in _appended_rows(sweep_dir / TIMELINE, TIMELINE_COLUMNS):
        timeline.setdefault(row["trial"], []).append(
            (float(row["reported_at"]), float(row["frames"]))
        )
    return timeline


def read_lineage(sweep_dir: Path) -> list[dict[str, Any]]:
    """The PBT exploits of a sweep, in order, each once (a resumed sweep may redo one)."""
    rows, seen = [], set()
    for row in _appended_rows(sweep_dir / LINEAGE, LINEAGE_COLUMNS):
        if tuple(row.values()) in seen:
            continue
        seen.add(tuple(row.values()))
        for key in ("generation", "frames", "own_frames"):
            row[key] = int(float(row[key]))
        row["overrides"] = json.loads(row["overrides"])
        rows.append(row)
    return rows


def collect_results(
    sweep_dir: Path,
    trials: Sequence[Mapping[str, Any]],
    metric: str,
    errors: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One row per trial: its overrides, status, size and metric.

    Args:
        sweep_dir: the sweep directory.
        trials: each trial's overrides, in trial order.
        metric: the sweep metric; ``final_<metric>`` is its last value, ``best_<metric>`` its
            best over the run.
        errors: trial name -> error Tune recorded for it (a worker that died).
    """
    exploits: dict[str, int] = {}
    skipped: dict[str, int] = {}  # frames an exploit jumped (negative: ran again)
    for row in read_lineage(sweep_dir):
        exploits[row["trial"]] = exploits.get(row["trial"], 0) + 1
        skipped[row["trial"]] = skipped.get(row["trial"], 0) + row["frames"] - row["own_frames"]
    results = []
    for index, overrides in enumerate(trials):
        name = trial_name(index)
        rows = read_rows(sweep_dir / TRIALS_DIR / name / "metrics.csv")
        status = read_status(sweep_dir, name) or {}
        reason = status.get("reason") or (errors or {}).get(name, "")
        state = status.get("status") or ("failed" if reason else "stopped" if rows else "not run")
        values = [row_metrics(rows[: i + 1])[metric] for i in range(len(rows))]
        last = rows[-1] if rows else {}
        results.append(
            {
                "trial": name,
                **overrides,
                "status": state,
                "generations": len(rows),
                "frames": int(float(last.get("frames") or 0)),
                "frames_run": int(float(last.get("frames") or 0)) - skipped.get(name, 0),
                "wall_time_s": float(last.get("wall_time_s") or 0.0),
                f"final_{metric}": values[-1] if values else math.nan,
                f"best_{metric}": max(values) if values else math.nan,
                "exploits": exploits.get(name, 0),
                "reason": reason,
            }
        )
    return results


def write_results(sweep_dir: Path, results: Sequence[Mapping[str, Any]]) -> Path:
    """Writes ``results.csv`` (replacing an earlier one) and returns its path."""
    path = sweep_dir / RESULTS_FILE
    columns = list(dict.fromkeys(key for row in results for key in row))
    temporary = path.with_name(f".{RESULTS_FILE}.tmp")
    with temporary.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(results)
    temporary.replace(path)
    return path


def best_table(
    results: Sequence[Mapping[str, Any]], keys: Sequence[str], metric: str, top: int = 10
) -> str:
    """The ``top`` configurations by mean final metric over their seeds (failed trials
    excluded), as aligned text: one line per configuration, best first."""
    swept = [k for k in keys if k != "seed"]
    groups: dict[tuple, list[float]] = {}
    for row in results:
        value = row[f"final_{metric}"]
        if row["status"] != "failed" and math.isfinite(value):
            groups.setdefault(tuple(row.get(k) for k in swept), []).append(value)
    ranked = sorted(groups.items(), key=lambda item: -float(np.mean(item[1])))[:top]
    header = [*swept, f"{metric} (mean ± std)", "seeds"]
    lines = [
        [*(_show(v) for v in config), f"{np.mean(v):.4g} ± {np.std(v):.2g}", str(len(v))]
        for config, v in ranked
    ]
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *lines]
    )


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
