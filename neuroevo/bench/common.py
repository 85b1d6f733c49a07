"""Shared helpers of the benchmarks: timing with repeats, a printed table and a JSON dump."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def median_rate(run: Callable[[], float], repeats: int) -> tuple[float, list[float]]:
    """Calls ``run`` (which returns a work count) ``repeats`` times; median work per second."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        work = run()
        rates.append(work / (time.perf_counter() - start))
    return statistics.median(rates), rates


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    import tensorflow as tf

    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Prints an aligned plain-text table (floats with thousands separators)."""

    def fmt(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
        return str(value)

    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print(f"\n{title}")
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def write_json(path: str | Path, payload: dict[str, Any]) -> Path:
    """Writes the benchmark's results with the machine description."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine_info(), **payload}, indent=2) + "\n")
    print(f"\nwrote {path}")
    return path
