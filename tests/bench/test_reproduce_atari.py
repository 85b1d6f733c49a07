"""The Atari suite of ``python -m benchmarks reproduce``: its recipes load as the issue sets
them, the random policy plays seeded episodes, and the report reads finished runs into the
JSON, the curves and the RESULTS.md section (fake runs: no training)."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import random_policy, reproduce, reproduce_atari
from benchmarks.reproduce import Run
from benchmarks.reproduce_atari import ATARI, PAPER, game_of
from neuroevo.config.schema import Config, load_config
from neuroevo.envs.atari import rom_path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny_atari.yaml"


def test_recipes_are_five_ga_games_and_es_on_frostbite_at_the_papers_test() -> None:
    ga = [game_of(r) for r in ATARI if r.name.startswith("ga_atari_10m@")]
    es = [game_of(r) for r in ATARI if r.name.startswith("es_atari_10m@")]
    assert len(set(ga)) == 5 and "frostbite" in ga and es == ["frostbite"]
    for recipe in ATARI:
        cfg = load_config(recipe.config, recipe.overrides)
        rom_path(cfg.env.id)  # a game ale-py ships
        assert cfg.env.id == game_of(recipe) and recipe.seeds == 1
        assert cfg.budget.frames == 10_000_000
        assert (cfg.test.at_end, cfg.test.episodes, cfg.test.noop_max) == (True, 200, 30)
        assert cfg.env.options.frame_skip == 4 and cfg.env.options.noop_max == 30
    for (config, game), paper in PAPER.items():
        assert any(r.name == f"{config}@{game}" for r in ATARI) and paper.source


def _tiny(*overrides: str) -> Config:
    return load_config(TINY, ["test.max_episode_steps=25", *overrides])


def test_random_policy_is_seeded_and_independent_of_slots(monkeypatch) -> None:
    cfg = _tiny()
    returns = random_policy.random_returns(cfg, 3)
    assert returns.shape == (3,) and np.all(returns <= 0)  # Pong: the opponent scores first
    np.testing.assert_array_equal(random_policy.random_returns(cfg, 3), returns)
    monkeypatch.setattr(random_policy, "MAX_SLOTS", 1)  # one slot plays the episodes in turn
    np.testing.assert_array_equal(random_policy.random_returns(cfg, 3), returns)
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        random_policy.random_returns(cfg, 0)


def test_random_score_is_measured_once_per_protocol(tmp_path, monkeypatch) -> None:
    cfg = _tiny()
    first = random_policy.cached_random_score(cfg, 2, tmp_path)
    assert first["episodes"] == 2 and len(first["returns"]) == 2
    assert first["env"]["max_episode_steps"] == 25 and first["env"]["atari"]["noop_max"] == 30

    def unexpected(*args: object) -> None:
        raise AssertionError("measured again")

    monkeypatch.setattr(random_policy, "random_returns", unexpected)
    assert random_policy.cached_random_score(cfg, 2, tmp_path) == first
    with pytest.raises(AssertionError, match="measured again"):  # another protocol: measured
        random_policy.cached_random_score(_tiny("test.noop_max=5"), 2, tmp_path)


def _finished_run(recipe: reproduce.Recipe, path: Path, curve: list[tuple], test: float) -> Run:
    """A run directory as training leaves it: metrics.csv, test.json and run.json."""
    path.mkdir(parents=True)
    with (path / "metrics.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["generation", "frames", "wall_time_s", "best_elite_score", "test_mean"])
        for generation, (frames, wall_s, best) in enumerate(curve):
            last = generation == len(curve) - 1
            writer.writerow([generation, frames, wall_s, best, test if last else ""])
    scores = {"mean": test, "median": test, "std": 0.0, "min": test, "max": test}
    (path / "test.json").write_text(json.dumps({**scores, "episodes": 200, "noop_max": 30}))
    sessions = [{"seconds": curve[-1][1] + 60, "foreign_load": 0.25, "exit": 0}]
    (path / "run.json").write_text(json.dumps({"sessions": sessions}))
    return Run(recipe, 0, path, ())


def test_report_from_finished_runs(tmp_path, monkeypatch) -> None:
    ga, es = ATARI[0], ATARI[-1]  # GA and ES on Frostbite
    runs = [
        _finished_run(ga, tmp_path / "ga", [(5e6, 1800.0, 160.0), (1e7, 3600.0, 250.0)], 230.0),
        _finished_run(es, tmp_path / "es", [(1e7, 1800.0, 90.0)], 80.0),
        Run(ATARI[1], 0, tmp_path / "pending", ()),
    ]
    random = {"mean": 65.0, "median": 60.0}
    monkeypatch.setattr(reproduce_atari, "random_score", lambda *args: random)
    monkeypatch.setattr(
        reproduce_atari,
        "machine_info",
        lambda: {
            "cpu": "Test CPU",
            "cpu_count": 2,
            "tensorflow": "2.x",
            "time": "2026-12-07T00:00:00",
        },
    )
    results = tmp_path / "RESULTS.md"
    results.write_text(
        "# Results\n\n<!-- reproduce:mujoco:begin -->\nkept\n<!-- reproduce:mujoco:end -->\n"
    )
    args = argparse.Namespace(
        runs=tmp_path,
        plot=tmp_path / "atari.png",
        markdown=results,
        command="reproduce --suite atari",
    )
    payload = reproduce.report("atari", runs, args)

    frostbite = payload["results"]["Frostbite"]
    (ga_run,) = frostbite[ga.name]["runs"]
    assert ga_run["generations"] == 2 and ga_run["train_hours"] == 1.0
    assert ga_run["hours_per_1b"] == pytest.approx(100.0)  # 1 hour per 10M frames
    assert ga_run["test"]["mean"] == 230.0 and ga_run["foreign_load"] == 0.25
    assert frostbite[ga.name]["paper"] is None and frostbite[es.name]["paper"]["score"] == 370
    assert payload["results"]["Seaquest"][ATARI[1].name] == {"runs": [], "pending": 1}
    assert json.loads((tmp_path / "atari.json").read_text()) == payload
    assert (tmp_path / "atari.png").stat().st_size > 0

    text = results.read_text()
    assert "kept" in text and text.count("<!-- reproduce:atari:begin -->") == 1
    assert "| Frostbite | `ga_atari_10m@frostbite` | 230 (230; 200 episodes, 30 no-ops) | " in text
    assert "| 65.0 (60.0) | - | 10,000,000 | 2 | 1.00 | 100 |" in text
    assert "| 370 [1] | 10,000,000 | 1 | 0.50 | 50 |" in text and "[1] Salimans et al. 2017" in text
    assert "| Seaquest | `ga_atari_10m@seaquest` | 1 pending |" in text
    assert "Test CPU, 2 cores (other processes used 0.25-0.25 cores" in text
    assert "![atari best elite scores](atari.png)" in text


def test_help_lists_both_suites(capsys) -> None:
    with pytest.raises(SystemExit):
        reproduce.main(["--help"])
    assert "{mujoco,atari}" in capsys.readouterr().out
