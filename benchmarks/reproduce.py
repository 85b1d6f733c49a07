"""``python -m benchmarks reproduce --suite mujoco|atari``: train the recipes of
``configs/reproduce/`` and write what they reach on this machine into ``docs/RESULTS.md``.

**mujoco**: each recipe trains on its task (the C++ MuJoCo op; Swimmer through the gymnasium
adapter) and tests the policy a user would keep, the current centre, on 10 fresh episodes every
few generations (``test.policy: elite``). A run reaches its task's threshold at the first test
whose mean return is at least the threshold of Mania et al. 2018 (ARS, Table 1); the report
gives, per task, how many seeds reach it, the median env steps and training minutes to it
(over all seeds: a seed that never reaches it counts as never) and each seed's final test
return, with curves of the test return against env steps and against wall time.

**atari**: the deep GA (Such et al. 2017) on Frostbite, Seaquest, Asterix, Amidar and Kangaroo
and ES (Salimans et al. 2017) on Frostbite, 10M emulator frames each, one seed; each run ends
with the papers' test of its best elite (200 episodes, up to 30 no-ops), and the report puts
beside it the random policy's score on the same episodes, the paper's score after 1B frames
where a readable copy gives it, the training hours and the hours 1B frames would take at that
rate, with curves of the best elite's score against frames and hours
(:mod:`benchmarks.reproduce_atari`).

Every run is a child ``python -m neuroevo.train`` in ``--runs``/<suite>/<recipe>-s<seed>, which
a later call resumes from its newest checkpoint (``--resume``) and never retrains once it
finished (its ``run.json``). Each run is held by a lock while it trains, so several processes
started on the same ``--runs`` share the work (or split it by ``--tasks``); each writes the
report from the runs finished so far. Training minutes are the run's own wall time without
its tests (``metrics.csv``'s ``wall_time_s``); the seconds of the whole process and the load
other processes put on the machine during the run are recorded beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import hashlib
import json
import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, busy_cpu_seconds, machine_info
from neuroevo.core.files import try_lock

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # machine_info imports TensorFlow

CONFIGS = REPO_ROOT / "configs" / "reproduce"
RESULTS = REPO_ROOT / "docs" / "RESULTS.md"
README = REPO_ROOT / "README.md"
IMAGES = REPO_ROOT / "docs" / "images"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One shipped config trained on one task.

    Attributes:
        name: the recipe's name, the config file's stem (``ars_hopper``), with a variant after
            ``@`` when one config serves several recipes (``ga_atari_10m@frostbite``).
        task: what the table groups by (``Hopper``, ``Frostbite``).
        threshold: the return that counts as solved (None: the suite has none, Atari).
        seeds: seeds trained by default.
        target_minutes: training minutes per seed the threshold should be reached in.
        overrides: ``--set`` values applied to the config (the Atari game).
    """

    name: str
    task: str
    threshold: float | None = None
    seeds: int = 3
    target_minutes: float = 30.0
    overrides: tuple[str, ...] = ()

    @property
    def config(self) -> Path:
        """``configs/reproduce/<name>.yaml``, else a shipped ``configs/<name>.yaml`` (the part
        of the name before ``@``, which names a variant made by ``overrides``)."""
        file = f"{self.name.split('@')[0]}.yaml"
        return CONFIGS / file if (CONFIGS / file).is_file() else CONFIGS.parent / file


COMPARED = (
    "env.decrease_training_rewards_by=1",
    "budget.frames=10000000",
    "budget.hours=0.5",
    "test.policy=elite",
    "test.every_generations=5",
    "test.episodes=10",
    "test.at_end=true",
    "logging.tensorboard=false",
)
"""What turns a shipped Hopper config into a reproduce recipe: ARS's alive-bonus removal and
budget, and the same test of the centre."""

MUJOCO = (
    Recipe("ars_swimmer", "Swimmer", 325),
    Recipe("ars_swimmer_n4", "Swimmer", 325),
    Recipe("cma_es_swimmer", "Swimmer", 325),
    Recipe("ars_hopper", "Hopper", 3120),
    Recipe(
        "ars_hopper@no_shift", "Hopper", 3120, 1, overrides=("env.decrease_training_rewards_by=0",)
    ),
    Recipe("pgpe_hopper@shift", "Hopper", 3120, 1, overrides=COMPARED),
    Recipe(
        "es_hopper@shift",
        "Hopper",
        3120,
        1,
        overrides=(*COMPARED, "model.mlp.hidden_sizes=[64, 64]"),
    ),
    Recipe("ars_half_cheetah", "HalfCheetah", 3430),
    Recipe("ars_walker2d", "Walker2d", 4390),
    Recipe("ars_ant", "Ant", 3580, seeds=1, target_minutes=60),
    Recipe("ars_humanoid", "Humanoid", 6000, seeds=1, target_minutes=60),
)
"""The ARS paper's reward thresholds (Mania et al. 2018, Table 1, after Gu et al. 2016); the
first four tasks are the issue's 2-of-3-seeds targets, Ant and Humanoid one attempt each. On
Hopper, one seed each of what explains the ARS result: ARS without the alive-bonus removal,
and PGPE and ES (their shipped 2x64 MLP recipes) with it. On Swimmer, CMA-ES on ARS's linear
policy beside ARS's own recipes."""


# Running.


@dataclasses.dataclass(frozen=True)
class Run:
    """One seed of one recipe and where it lives."""

    recipe: Recipe
    seed: int
    path: Path
    extra: tuple[str, ...]

    @property
    def record(self) -> Path:
        return self.path / "run.json"

    @property
    def finished(self) -> bool:
        return self.record.is_file()


def run_dir_name(recipe: Recipe, seed: int, extra: Sequence[str]) -> str:
    """``<recipe>-s<seed>``, plus a digest of any ``--set`` so other settings never mix."""
    name = f"{recipe.name.replace('@', '-')}-s{seed}"
    if extra:
        name += "-" + hashlib.sha256("\n".join(extra).encode()).hexdigest()[:8]
    return name


@contextlib.contextmanager
def claimed(run: Run) -> Iterator[bool]:
    """Holds ``run``'s lock while its body trains it; yields False when another process
    holds it (that process trains the run)."""
    run.path.parent.mkdir(parents=True, exist_ok=True)
    lock = try_lock(run.path.parent / f".{run.path.name}.lock")
    if lock is None:
        yield False
        return
    with lock:
        yield True


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """SIGTERM (``kill``, a job scheduler) ends the benchmark as Ctrl-C does: ``subprocess.run``
    then kills the training child instead of leaving it to run on unowned (the previous
    handler is put back afterwards)."""

    def leave(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def train(run: Run) -> None:
    """Trains ``run`` to its budget in a child process, resuming what an earlier call left,
    and writes ``run.json``: the seconds and foreign load of each session of it."""
    command = [sys.executable, "-m", "neuroevo.train", "--quiet"]
    if (run.path / "config.yaml").is_file():
        command += ["--resume", str(run.path), "--start-over"]
    else:
        sets = [*run.recipe.overrides, f"seed={run.seed}", *run.extra]
        command += ["--config", str(run.recipe.config), "--run-dir", str(run.path)]
        command += [arg for item in sets for arg in ("--set", item)]
    sessions_file = run.path.parent / f".{run.path.name}.sessions.json"
    sessions = json.loads(sessions_file.read_text()) if sessions_file.is_file() else []
    busy, own, start = busy_cpu_seconds(), _children_cpu_seconds(), time.time()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    elapsed = time.time() - start
    foreign = None
    if busy is not None:
        used = _children_cpu_seconds() - own
        foreign = max(0.0, (busy_cpu_seconds() - busy - used) / max(elapsed, 1e-9))
    sessions.append({"seconds": elapsed, "foreign_load": foreign, "exit": done.returncode})
    sessions_file.write_text(json.dumps(sessions) + "\n")
    if done.returncode != 0:
        raise RuntimeError(f"{run.path.name} failed:\n{done.stderr[-3000:]}")
    record = {"recipe": run.recipe.name, "seed": run.seed, "extra": list(run.extra)}
    temp = run.record.with_name(".run.json.tmp")
    temp.write_text(json.dumps(record | {"sessions": sessions}, indent=1) + "\n")
    os.replace(temp, run.record)


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# Reading the results.


def read_tests(path: Path) -> list[dict[str, float]]:
    """Each test of a run's ``metrics.csv``: its generation, env steps (``frames``), training
    seconds and mean test return, in order."""
    with (path / "metrics.csv").open() as handle:
        return [
            {
                "generation": int(row["generation"]),
                "steps": float(row["frames"]),
                "wall_s": float(row["wall_time_s"]),
                "test": float(row["test_mean"]),
            }
            for row in csv.DictReader(handle)
            if row.get("test_mean") not in (None, "")
        ]


def first_reaching(tests: Sequence[dict[str, float]], threshold: float) -> dict[str, float] | None:
    """The first test whose mean return is at least ``threshold``, or None."""
    return next((t for t in tests if t["test"] >= threshold), None)


def run_summary(run: Run) -> dict[str, Any]:
    """What the report shows of one finished run."""
    tests = read_tests(run.path)
    threshold = run.recipe.threshold
    reached = None if threshold is None else first_reaching(tests, threshold)
    sessions = json.loads(run.record.read_text())["sessions"]
    loads = [s["foreign_load"] for s in sessions if s["foreign_load"] is not None]
    return {
        "seed": run.seed,
        "tests": tests,
        "reached": reached,
        "final": tests[-1]["test"] if tests else math.nan,
        "best": max((t["test"] for t in tests), default=math.nan),
        "steps": tests[-1]["steps"] if tests else math.nan,
        "train_s": tests[-1]["wall_s"] if tests else math.nan,
        "process_s": sum(s["seconds"] for s in sessions),
        "foreign_load": statistics.mean(loads) if loads else None,
    }


def median_to_threshold(values: Sequence[float | None]) -> float | None:
    """The median over seeds, a seed that never reached the threshold counting as infinite;
    None when that median is infinite."""
    if not values:
        return None
    median = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(median) else median


# The report.


def plot(suite: str, results: dict[str, Any], output: Path) -> None:
    """Test return against env steps (left) and training minutes (right), a row per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(results)
    fig, axes = plt.subplots(
        len(tasks), 2, figsize=(11, 2.6 * len(tasks)), squeeze=False, constrained_layout=True
    )
    for row, task in zip(axes, tasks, strict=True):
        by_steps, by_time = row
        for index, (recipe, entry) in enumerate(results[task]["recipes"].items()):
            colour = f"C{index}"
            for k, run in enumerate(entry["runs"]):
                steps = [t["steps"] / 1e6 for t in run["tests"]]
                minutes = [t["wall_s"] / 60 for t in run["tests"]]
                returns = [t["test"] for t in run["tests"]]
                label = recipe if k == 0 else None
                by_steps.plot(steps, returns, color=colour, alpha=0.8, label=label)
                by_time.plot(minutes, returns, color=colour, alpha=0.8)
        for axis in row:
            axis.axhline(results[task]["threshold"], color="k", ls="--", lw=0.8)
            axis.grid(alpha=0.3)
            axis.set_ylabel(f"{task}\ntest return")
        if by_steps.get_legend_handles_labels()[0]:
            by_steps.legend(fontsize="small", loc="lower right")
    axes[-1][0].set_xlabel("env steps (millions)")
    axes[-1][1].set_xlabel("training wall time (minutes)")
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=100)
    plt.close(fig)
    print(f"wrote {output}")


HEADLINE = ("Hopper", "HalfCheetah", "Walker2d")
"""The tasks of README's "What it reaches" (the issue's targets on 2 cores)."""


def _to_threshold(runs: Sequence[dict[str, Any]]) -> tuple[int, float | None, float | None]:
    """How many seeds reached the threshold, and the median env steps and training minutes to
    it (None when the median seed never did)."""
    reached = [r["reached"] for r in runs]
    steps = median_to_threshold([None if r is None else r["steps"] for r in reached])
    minutes = median_to_threshold([None if r is None else r["wall_s"] / 60 for r in reached])
    return sum(r is not None for r in reached), steps, minutes


def _cells(steps: float | None, minutes: float | None) -> str:
    """The steps and minutes columns (``-``: the median seed never reached the threshold)."""
    return (
        f"{'-' if steps is None else f'{steps / 1e6:.2f}M'} | "
        f"{'-' if minutes is None else f'{minutes:.1f}'}"
    )


def _measured_by(payload: dict[str, Any]) -> str:
    machine = payload["machine"]
    loads = [
        run["foreign_load"]
        for task in payload["results"].values()
        for entry in task["recipes"].values()
        for run in entry["runs"]
        if run["foreign_load"] is not None
    ]
    load = f"{min(loads):.2f}-{max(loads):.2f}" if loads else "unknown"
    return (
        f"Measured by `{payload['command']}` from {payload['first_day']} to "
        f"{machine['time'][:10]} on {machine['cpu']}, {machine['cpu_count']} cores (other "
        f"processes used {load} cores on average during the runs); TensorFlow "
        f"{machine['tensorflow']}."
    )


def markdown(suite: str, payload: dict[str, Any], image: str) -> str:
    """The tables of the measured numbers (the text around them is written by hand)."""
    lines = [
        _measured_by(payload),
        "",
        "| task | recipe | threshold | seeds reaching it | median env steps to it | "
        "median training minutes to it | final test return (per seed) | best test return "
        "(per seed) | env steps, minutes (per seed) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for task, result in payload["results"].items():
        for recipe, entry in result["recipes"].items():
            runs = entry["runs"]
            if not runs:
                continue
            count, steps, minutes = _to_threshold(runs)
            pending = entry["pending"]
            lines.append(
                f"| {task} | `{recipe}` | {result['threshold']:,.0f} | "
                f"{count} of {len(runs)}{f' ({pending} pending)' if pending else ''} | "
                f"{_cells(steps, minutes)} | "
                + ", ".join(f"{r['final']:,.0f}" for r in runs)
                + " | "
                + ", ".join(f"{r['best']:,.0f}" for r in runs)
                + " | "
                + ", ".join(f"{r['steps'] / 1e6:.1f}M, {r['train_s'] / 60:.0f}" for r in runs)
                + " |"
            )
    lines += ["", f"![{suite} test returns]({image})"]
    return "\n".join(lines)


def headline(payload: dict[str, Any]) -> str:
    """README's rows: per headline task, the recipe whose seeds reached the threshold most
    often (then soonest), with a link to the whole table."""
    lines = [
        "| task | threshold (ARS paper) | recipe | seeds reaching it | median env steps to it | "
        "median training minutes to it |",
        "|---|---|---|---|---|---|",
    ]
    for task in HEADLINE:
        result = payload["results"].get(task)
        candidates = [
            (recipe, _to_threshold(entry["runs"]))
            for recipe, entry in (result or {"recipes": {}})["recipes"].items()
            if entry["runs"]
        ]
        if not candidates:
            continue
        recipe, (count, steps, minutes) = max(
            candidates, key=lambda c: (c[1][0], -math.inf if c[1][1] is None else -c[1][1])
        )
        lines.append(
            f"| {task} | {result['threshold']:,.0f} | `{recipe}` | {count} of "
            f"{len(result['recipes'][recipe]['runs'])} | {_cells(steps, minutes)} |"
        )
    return "\n".join([*lines, "", _measured_by(payload)])


def write_section(path: Path, suite: str, table: str) -> None:
    """Replaces the text between the suite's markers in ``path`` (appended if absent)."""
    begin, end = f"<!-- reproduce:{suite}:begin -->", f"<!-- reproduce:{suite}:end -->"
    text = path.read_text() if path.exists() else ""
    if begin not in text:
        text += f"\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    path.write_text(f"{head}{begin}\n{table}\n{end}{tail}")
    print(f"wrote {path}")


def report(suite: str, runs: Sequence[Run], args: argparse.Namespace) -> dict[str, Any]:
    """Summarises the finished runs, writes the JSON, the curves and the Markdown section."""
    if suite == "atari":
        from benchmarks.reproduce_atari import report as atari_report

        return atari_report(runs, args)
    results: dict[str, Any] = {}
    for run in runs:
        task = results.setdefault(
            run.recipe.task, {"threshold": run.recipe.threshold, "recipes": {}}
        )
        entry = task["recipes"].setdefault(run.recipe.name, {"runs": [], "pending": 0})
        if run.finished:
            entry["runs"].append(run_summary(run))
        else:
            entry["pending"] += 1
    json_path = args.runs / f"{suite}.json"
    previous = json.loads(json_path.read_text()) if json_path.is_file() else {}
    payload = {
        "machine": machine_info(),
        "first_day": previous.get("first_day", time.strftime("%Y-%m-%d")),
        "command": args.command,
        "results": results,
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(payload, indent=1) + "\n")
    image = args.plot or IMAGES / f"reproduce_{suite}.png"
    plot(suite, results, image)
    markdown_path: Path = args.markdown
    relative = os.path.relpath(image, markdown_path.parent)
    write_section(markdown_path, suite, markdown(suite, payload, relative))
    if suite == "mujoco" and markdown_path == RESULTS:
        write_section(README, "headline", headline(payload))
    return payload


def plan(recipes: Sequence[Recipe], args: argparse.Namespace) -> list[Run]:
    """Every run the arguments ask for."""
    extra = tuple(args.set)
    runs = []
    for recipe in recipes:
        for seed in range(args.seeds or recipe.seeds):
            name = run_dir_name(recipe, seed, extra)
            runs.append(Run(recipe, seed, args.runs / args.suite / name, extra))
    return runs


def suite_recipes(suite: str) -> tuple[Recipe, ...]:
    if suite == "mujoco":
        return MUJOCO
    from benchmarks.reproduce_atari import ATARI

    return ATARI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks reproduce",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--suite", choices=("mujoco", "atari"), required=True)
    parser.add_argument(
        "--seeds", type=int, help="seeds per recipe (default: each recipe's own: 3, or 1)"
    )
    parser.add_argument("--tasks", help="comma-separated tasks to train (default: all)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for every run (a smoke run: --set budget.frames=20000); runs "
        "with overrides live in their own directories",
    )
    parser.add_argument("--runs", type=Path, default=Path("bench_results/reproduce"))
    parser.add_argument("--markdown", type=Path, default=RESULTS)
    parser.add_argument("--plot", type=Path, help="the curves' PNG (default: docs/images/)")
    parser.add_argument(
        "--report-only", action="store_true", help="write the report from finished runs only"
    )
    args = parser.parse_args(argv)
    args.command = "python -m benchmarks reproduce " + " ".join(argv or sys.argv[1:])
    recipes = suite_recipes(args.suite)
    if args.tasks:
        wanted = set(args.tasks.split(","))
        unknown = wanted - {r.task for r in recipes}
        if unknown:
            parser.error(
                f"unknown tasks {sorted(unknown)}; this suite has "
                f"{sorted({r.task for r in recipes})}"
            )
        recipes = tuple(r for r in recipes if r.task in wanted)
    runs = plan(recipes, args)
    if not args.report_only:
        with sigterm_as_exit():
            train_all(runs)
    report(args.suite, runs, args)
    return 0


def train_all(runs: Sequence[Run]) -> None:
    """Trains every unfinished run that no other process holds, in order."""
    for run in runs:
        if run.finished:
            continue
        with claimed(run) as mine:
            if mine and not run.finished:
                print(f"training {run.path.name}", flush=True)
                train(run)
            elif not mine:
                print(f"{run.path.name}: another process trains it", flush=True)
