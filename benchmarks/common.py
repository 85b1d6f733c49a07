"""Shared helpers of the benchmarks: timing with repeats, measuring on a quiet machine, a
printed table and a JSON dump."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[1]
"""Children run from here, so ``python -m benchmarks...`` finds this package."""

T = TypeVar("T")


def median_rate(run: Callable[[], float], repeats: int) -> tuple[float, list[float]]:
    """Calls ``run`` (which returns a work count) ``repeats`` times; median work per second."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        work = run()
        rates.append(work / (time.perf_counter() - start))
    return statistics.median(rates), rates


def paired_scaling(base: Sequence[float], other: Sequence[float]) -> float:
    """Median over rounds of ``other[i] / base[i]``, two rows' rates from the same rounds.

    The two turns of a round run back to back, so drift in the machine's speed between rounds
    cancels, which a ratio of the two rows' medians does not.
    """
    return statistics.median(b / a for a, b in zip(base, other, strict=True))


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """When a measurement counts as disturbed by other load, and how often to retry it."""

    quiet_load: float = 0.25  # cores of foreign load tolerated during a measurement
    max_retries: int = 2
    max_wait_seconds: float = 60.0  # before each attempt, wait at most this long for quiet

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RetryPolicy:
        """The policy of the options ``add_retry_arguments`` defines (defaults if absent)."""
        return cls(
            getattr(args, "quiet_load", cls.quiet_load),
            getattr(args, "max_retries", cls.max_retries),
            getattr(args, "max_wait", cls.max_wait_seconds),
        )


def add_retry_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``--quiet-load``, ``--max-retries`` and ``--max-wait`` unless already there."""
    if any("--quiet-load" in action.option_strings for action in parser._actions):
        return
    parser.add_argument(
        "--quiet-load",
        type=float,
        default=RetryPolicy.quiet_load,
        help="retry a measurement during which other processes used more than this many "
        "cores (default: %(default)s)",
    )
    parser.add_argument(
        "--max-retries",
        type=int,
        default=RetryPolicy.max_retries,
        help="retries of a disturbed measurement (default: %(default)s)",
    )
    parser.add_argument(
        "--max-wait",
        type=float,
        default=RetryPolicy.max_wait_seconds,
        help="seconds to wait for a quiet machine before each measurement (default: "
        "%(default)s; 0 disables waiting)",
    )


def measure_quietly(
    measure: Callable[[], tuple[T, float]], retry: RetryPolicy
) -> tuple[T, float | None]:
    """Runs ``measure`` on a quiet machine; returns its result and the foreign load.

    ``measure`` returns its result and the CPU-seconds the measured process used. Each attempt
    first waits for other processes to use <= ``retry.quiet_load`` cores; around it the
    machine's busy CPU time (/proc/stat) minus the measured process's own is the foreign load
    (cores; None where /proc/stat is unreadable). An attempt under more foreign load than
    ``retry.quiet_load`` is retried up to ``retry.max_retries`` times; the last one is kept.
    """
    for _ in range(retry.max_retries + 1):
        wait_for_quiet(retry)
        busy, start = busy_cpu_seconds(), time.perf_counter()
        result, cpu = measure()
        foreign = None
        if busy is not None:
            elapsed = time.perf_counter() - start
            foreign = max(0.0, (busy_cpu_seconds() - busy - cpu) / elapsed)
        if foreign is None or foreign <= retry.quiet_load:
            break
    return result, foreign


def wait_for_quiet(retry: RetryPolicy) -> None:
    """Sleeps in 1 s steps until other processes use <= quiet_load cores (or time runs out)."""
    deadline = time.perf_counter() + retry.max_wait_seconds
    while time.perf_counter() < deadline:
        busy, start = busy_cpu_seconds(), time.perf_counter()
        if busy is None:
            return
        time.sleep(1.0)
        if (busy_cpu_seconds() - busy) / (time.perf_counter() - start) <= retry.quiet_load:
            return


class Child:
    """A benchmark child process that answers one stdout line per stdin line.

    Started as ``python -m <module> --serve <args>`` from the repository root. Its stderr
    (TensorFlow's logging) goes to a temporary file, never to a pipe: an unread pipe fills
    and blocks a child that writes much. The file is shown when the child fails.
    """

    def __init__(self, module: str, args: Sequence[str]) -> None:
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed by close()
        self._process = subprocess.Popen(
            [sys.executable, "-m", module, "--serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            cwd=REPO_ROOT,
        )

    def send(self, line: str) -> None:
        """Writes one request line."""
        self._process.stdin.write(f"{line}\n")
        self._process.stdin.flush()

    def reply(self, what: str) -> str:
        """The next stdout line (stdout carries protocol lines only); ``what`` names the
        step in the error raised, with the end of the child's log, if the child died."""
        line = self._process.stdout.readline()
        if not line:
            self._process.wait()
            self._log.seek(0)
            raise RuntimeError(f"{what} failed:\n{self._log.read()[-3000:]}")
        return line.strip()

    def close(self) -> None:
        """Ends the child (closing stdin ends its request loop) and drops its log."""
        if not self._process.stdin.closed:
            self._process.stdin.close()
        self._process.wait()
        self._log.close()


def busy_cpu_seconds() -> float | None:
    """CPU-seconds all processes of the machine have been busy (Linux), else None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def load_range(loads: Sequence[float | None]) -> str:
    """Foreign load (cores) seen during a row's measurements, e.g. "0.02..0.31"."""
    known = [x for x in loads if x is not None]
    return f"{min(known):.2f}..{max(known):.2f}" if known else ""


def cpu_name() -> str:
    """The CPU's model name and the instruction set the ops are built for, e.g. "AMD EPYC
    (AVX-512, BF16)"; the platform's processor string where /proc/cpuinfo is missing."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Model")):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        from neuroevo.ops.build import target_isa

        isa = target_isa()
        extra = [f for f in ("AVX512BF16", "AMX") if f in isa["features"]]
        return f"{name} ({', '.join([isa['isa'], *extra])})"
    except Exception:  # the name alone still says what the numbers ran on
        return name


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    import tensorflow as tf

    return {
        "cpu": cpu_name(),
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
