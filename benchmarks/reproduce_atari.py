"""The Atari suite of ``python -m benchmarks reproduce``: the deep GA of Such et al. (2017) on
five games and OpenAI ES (Salimans et al. 2017) on Frostbite, 10M emulator frames each, one
seed (``configs/reproduce/ga_atari_10m.yaml``, ``es_atari_10m.yaml``).

Each run ends with the papers' test of its best elite (200 episodes, up to 30 random no-ops:
``test.json``). The report puts beside it the score of uniformly random actions under the same
protocol (:mod:`benchmarks.random_policy`, measured once per game and cached in the runs
directory), the paper's score after 1B frames where a copy of the paper we could read gives
it (:data:`PAPER`), the training hours of the run and the hours 1B frames would take at its
rate, and draws the best elite's score against frames and against hours.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import machine_info
from benchmarks.random_policy import cached_random_score
from benchmarks.reproduce import IMAGES, Recipe, Run, run_summary, write_section
from neuroevo.cli.common import quiet_tensorflow_start_up
from neuroevo.config.schema import load_config

PAPER_FRAMES = 1e9
"""The budget of the papers' scores, against which each run's rate is projected."""


def _game_recipe(config: str, game: str, title: str) -> Recipe:
    """``config`` on ``game``, one seed; the table groups by the game's ``title``."""
    return Recipe(f"{config}@{game}", title, seeds=1, overrides=(f"env.id={game}",))


ATARI = (
    _game_recipe("ga_atari_10m", "frostbite", "Frostbite"),
    _game_recipe("ga_atari_10m", "seaquest", "Seaquest"),
    _game_recipe("ga_atari_10m", "asterix", "Asterix"),
    _game_recipe("ga_atari_10m", "amidar", "Amidar"),
    _game_recipe("ga_atari_10m", "kangaroo", "Kangaroo"),
    _game_recipe("es_atari_10m", "frostbite", "Frostbite"),
)
"""Games of the GA paper's results table (so its score stands beside ours) whose rewards come
early enough for 10M frames to show learning: random play scores 5-250 on each."""


@dataclasses.dataclass(frozen=True)
class PaperScore:
    """A published score after 1B frames and exactly where it was read."""

    score: float
    source: str


SALIMANS_TABLE_3 = (
    "Salimans et al. 2017 (arXiv 1703.03864v1), Table 3, column 'ES FF, 1 hour', as transcribed "
    "in AI-metrics/AI-metrics scrapers/atari.py (`es_table3`); the GA paper's Table 1 takes its "
    "ES scores from Salimans et al. 2017 and states their budget as 1B frames"
)

PAPER: dict[tuple[str, str], PaperScore] = {
    ("es_atari_10m", "frostbite"): PaperScore(370.0, SALIMANS_TABLE_3),
}
"""Paper scores by (config, game). The GA's own scores (Such et al. 2017, arXiv 1712.06567,
Table 1) are left out: no copy of that table we could read was found (docs/REPRODUCE.md)."""


# Reading the runs.


def read_curve(path: Path) -> list[dict[str, float]]:
    """Each generation of a run's ``metrics.csv``: its frames, training seconds and the best
    elite's score so far, in order."""
    with (path / "metrics.csv").open() as handle:
        return [
            {
                "generation": int(row["generation"]),
                "frames": float(row["frames"]),
                "wall_s": float(row["wall_time_s"]),
                "best_elite": float(row["best_elite_score"]),
            }
            for row in csv.DictReader(handle)
        ]


def atari_summary(run: Run) -> dict[str, Any]:
    """What the table shows of one finished run: its test (``test.json``), frames, generations,
    training hours and the hours 1B frames would take at its rate."""
    curve = read_curve(run.path)
    test = json.loads((run.path / "test.json").read_text())
    last = curve[-1]
    summary = run_summary(run)
    return {
        "seed": run.seed,
        "test": {k: test[k] for k in ("mean", "median", "std", "min", "max", "episodes")},
        "test_noop_max": test["noop_max"],
        "frames": last["frames"],
        "generations": last["generation"] + 1,
        "train_hours": last["wall_s"] / 3600,
        "hours_per_1b": last["wall_s"] / last["frames"] * PAPER_FRAMES / 3600,
        "best_elite": last["best_elite"],
        "curve": curve,
        "process_s": summary["process_s"],
        "foreign_load": summary["foreign_load"],
    }


def game_of(recipe: Recipe) -> str:
    """The ale-py game id a recipe plays (the part after ``@``)."""
    return recipe.name.split("@")[1]


def random_score(run: Run, runs_dir: Path) -> dict[str, Any]:
    """The random policy on the episodes of ``run``'s test, measured once and cached; the
    config is the one ``reproduce.train`` trains: the recipe's overrides, the seed, ``--set``."""
    sets = [*run.recipe.overrides, f"seed={run.seed}", *run.extra]
    cfg = load_config(run.recipe.config, sets)
    return cached_random_score(cfg, cfg.test.episodes, runs_dir / "atari" / "random")


def collect(runs: Sequence[Run], runs_dir: Path) -> dict[str, Any]:
    """Per game and recipe: the finished runs' summaries, how many are pending, and for a
    recipe with a finished run the random policy's and the paper's scores."""
    results: dict[str, Any] = {}
    for run in runs:
        game = results.setdefault(run.recipe.task, {})
        entry = game.setdefault(run.recipe.name, {"runs": [], "pending": 0})
        if not run.finished:
            entry["pending"] += 1
            continue
        entry["runs"].append(atari_summary(run))
        if "random" not in entry:
            entry["random"] = random_score(run, runs_dir)
            paper = PAPER.get((run.recipe.name.split("@")[0], game_of(run.recipe)))
            entry["paper"] = None if paper is None else dataclasses.asdict(paper)
    return results


# The report.


def plot(results: dict[str, Any], output: Path) -> None:
    """The best elite's score against frames (left) and training hours (right), a row per game,
    with the random policy (dotted) and the paper's 1B-frame score (dashed) where known."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = [game for game, recipes in results.items() if any(e["runs"] for e in recipes.values())]
    fig, axes = plt.subplots(
        max(len(games), 1),
        2,
        figsize=(11, 2.6 * max(len(games), 1)),
        squeeze=False,
        constrained_layout=True,
    )
    for row, game in zip(axes, games, strict=False):
        by_frames, by_hours = row
        for index, (recipe, entry) in enumerate(results[game].items()):
            colour, label = f"C{index}", recipe.split("@")[0]
            for run in entry["runs"]:
                frames = [p["frames"] / 1e6 for p in run["curve"]]
                hours = [p["wall_s"] / 3600 for p in run["curve"]]
                scores = [p["best_elite"] for p in run["curve"]]
                by_frames.plot(frames, scores, color=colour, marker=".", label=label)
                by_hours.plot(hours, scores, color=colour, marker=".")
            if entry.get("paper"):
                paper = entry["paper"]["score"]
                by_frames.axhline(
                    paper, color=colour, ls="--", lw=0.8, label=f"{label}, paper at 1B"
                )
                by_hours.axhline(paper, color=colour, ls="--", lw=0.8)
        randoms = {e["random"]["mean"] for e in results[game].values() if "random" in e}
        for index, random in enumerate(sorted(randoms)):
            by_frames.axhline(
                random, color="grey", ls=":", label=None if index else "random policy"
            )
            by_hours.axhline(random, color="grey", ls=":")
        for axis in row:
            axis.grid(alpha=0.3)
            axis.set_ylabel(f"{game}\nbest elite score")
        by_frames.legend(fontsize="small", loc="best")
    axes[-1][0].set_xlabel("emulator frames (millions)")
    axes[-1][1].set_xlabel("training wall time (hours)")
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=100)
    plt.close(fig)
    print(f"wrote {output}")


def _score(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"


def markdown(payload: dict[str, Any], image: str) -> str:
    """The table of the measured numbers and the sources of the paper's scores."""
    machine = payload["machine"]
    loads = [
        run["foreign_load"]
        for recipes in payload["results"].values()
        for entry in recipes.values()
        for run in entry["runs"]
        if run["foreign_load"] is not None
    ]
    load = f"{min(loads):.2f}-{max(loads):.2f}" if loads else "unknown"
    lines = [
        f"Measured by `{payload['command']}` from {payload['first_day']} to "
        f"{machine['time'][:10]} on {machine['cpu']}, {machine['cpu_count']} cores (other "
        f"processes used {load} cores on average during the runs); TensorFlow "
        f"{machine['tensorflow']}. Test score: the best elite's mean (median) over the "
        "episodes given, each starting with up to the no-ops given; random policy: uniform "
        "random actions from the minimal action set on the same episodes and no-op starts; "
        "paper: the score after 1B frames where a copy of the paper we could read gives it "
        "(docs/REPRODUCE.md); training hours: the generations' wall time (metrics.csv), "
        "without the test.",
        "",
        "| game | recipe | test score | random policy | paper at 1B frames | frames | "
        "generations | training hours | hours for 1B frames at this rate |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    sources: list[str] = []
    for game, recipes in payload["results"].items():
        for recipe, entry in recipes.items():
            if entry["pending"]:
                lines.append(f"| {game} | `{recipe}` | {entry['pending']} pending | | | | | | |")
            for run in entry["runs"]:
                test, random = run["test"], entry["random"]
                paper = "-"
                if entry["paper"]:
                    if entry["paper"]["source"] not in sources:
                        sources.append(entry["paper"]["source"])
                    note = sources.index(entry["paper"]["source"]) + 1
                    paper = f"{_score(entry['paper']['score'])} [{note}]"
                lines.append(
                    f"| {game} | `{recipe}` | {_score(test['mean'])} ({_score(test['median'])}; "
                    f"{test['episodes']} episodes, {run['test_noop_max']} no-ops) | "
                    f"{_score(random['mean'])} ({_score(random['median'])}) | {paper} | "
                    f"{run['frames']:,.0f} | {run['generations']} | "
                    f"{run['train_hours']:.2f} | {run['hours_per_1b']:,.0f} |"
                )
    if sources:
        lines.append("")
        lines += [f"[{i}] {source}." for i, source in enumerate(sources, 1)]
    lines += ["", f"![atari best elite scores]({image})"]
    return "\n".join(lines)


def report(runs: Sequence[Run], args: argparse.Namespace) -> dict[str, Any]:
    """Summarises the finished runs and writes ``<runs>/atari.json``, the curves and the
    Markdown section."""
    quiet_tensorflow_start_up()  # the random policy and machine_info import TensorFlow
    json_path = args.runs / "atari.json"
    previous = json.loads(json_path.read_text()) if json_path.is_file() else {}
    payload = {
        "machine": machine_info(),
        "first_day": previous.get("first_day", time.strftime("%Y-%m-%d")),
        "command": args.command,
        "results": collect(runs, args.runs),
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(payload, indent=1) + "\n")
    image = args.plot or IMAGES / "reproduce_atari.png"
    plot(payload["results"], image)
    markdown_path: Path = args.markdown
    relative = os.path.relpath(image, markdown_path.parent)
    write_section(markdown_path, "atari", markdown(payload, relative))
    return payload
