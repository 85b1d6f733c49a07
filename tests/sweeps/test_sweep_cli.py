"""A sweep's plan, checked before Ray starts: the trials a search space makes, every trial's
config against the schema (one ``error:`` line, exit 2, nothing written), the cores, and the
results table. No Ray here."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from run_helpers import SMALL_CARTPOLE

from neuroevo.cli.sweep import main
from neuroevo.config.schema import ConfigError, apply_overrides, load_config
from neuroevo.sweeps.engine import plan_sweep
from neuroevo.sweeps.results import best_table
from neuroevo.sweeps.space import Range, SearchSpace, parse_assignment, parse_range
from neuroevo.sweeps.trial import row_metrics

BASE = load_config(None, {**SMALL_CARTPOLE, "budget.generations": 2, "seed": 5})


def test_a_space_makes_every_combination_in_a_fixed_order() -> None:
    space = SearchSpace(
        {"algorithm.es.sigma": [0.1, 0.2], "model.mlp.hidden_sizes": [[4], [8]]},
        {"algorithm.es.learning_rate": Range(1e-3, 1e-1, log=True)},
        samples=2,
        seeds=2,
    )
    trials = space.trials(base_seed=5)
    assert len(trials) == 2 * 2 * 2 * 2
    assert trials[0]["seed"] == 5 and trials[1]["seed"] == 6
    assert [t["model.mlp.hidden_sizes"] for t in trials[:8:4]] == [[4], [8]]
    rates = [t["algorithm.es.learning_rate"] for t in trials]
    assert all(1e-3 <= r < 1e-1 for r in rates) and len(set(rates)) == 2
    assert space.trials(base_seed=5) == trials  # drawn from a seeded generator


def test_values_are_split_outside_brackets_and_parsed_as_yaml() -> None:
    assert parse_assignment("model.mlp.hidden_sizes=[64, 64],[32]", "--grid") == (
        "model.mlp.hidden_sizes",
        [[64, 64], [32]],
    )
    assert parse_assignment("a.b=1e-3, null ,pong", "--grid") == ("a.b", [1e-3, None, "pong"])
    assert parse_range("a.b=0.01,1", "--loguniform") == ("a.b", Range(0.01, 1.0, log=True))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--grid", "algorithm.es.sigmaa=0.1,0.2"], "sigmaa"),
        (["--grid", "algorithm.es.sigma=0.1,-1"], "trial 1 (algorithm.es.sigma=-1, seed=0)"),
        (["--grid", "algorithm.es.population_size=4.5"], "population_size"),
        (["--uniform", "algorithm.es.sigma=0.2,0.1"], "--uniform algorithm.es.sigma"),
        (["--loguniform", "algorithm.es.sigma=0,1"], "0 < LO"),
        (["--uniform", "algorithm.es.sigma=-1,1"], "range of algorithm.es.sigma"),
        (["--grid", "algorithm.es.sigma"], "expected KEY=VALUE"),
        (["--scheduler", "pbt"], "needs a swept hyperparameter"),
        (["--seeds", "0"], "--seeds must be a positive integer"),
        (["--grid", "seed=1,2", "--seeds", "2"], "seed is swept"),
        (["--set", "evaluator.workers=2", "--trials-in-parallel", "64"], "evaluator.workers=2"),
        (["--scheduler", "nope"], "invalid choice"),
    ],
)
def test_a_bad_sweep_is_one_error_line_and_exit_2_before_anything_is_written(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "base.yaml"
    config.write_text("budget: {generations: 2}\n")
    sweep_dir = tmp_path / "sweep"
    overrides = [f"--set={key}={value}" for key, value in SMALL_CARTPOLE.items()]
    argv = ["--config", str(config), *overrides, *args, "--sweep-dir", str(sweep_dir), "--quiet"]
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not sweep_dir.exists()


def exit_code(argv: list[str]) -> int:
    """``main``'s exit code, also when argparse exits (a usage error, ``--help``)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_resume_refuses_a_directory_without_a_sweep_and_new_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--resume", str(tmp_path), "--quiet"]) == 2
    assert "no sweep there" in capsys.readouterr().err
    assert main(["--resume", str(tmp_path), "--grid", "seed=1"]) == 2
    assert "drop --sweep-dir" in capsys.readouterr().err


def test_help_names_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--grid", "--uniform", "--loguniform", "--samples", "--seeds", "--set"):
        assert option in text
    for option in ("--scheduler", "--metric", "--trials-in-parallel", "--resume", "--sweep-dir"):
        assert option in text
    assert "fifo,asha,pbt" in text and "test_return,best_return" in text


def test_each_trial_gets_its_share_of_the_cores() -> None:
    space = SearchSpace({"algorithm.es.sigma": [0.1, 0.2, 0.3]})
    spec = plan_sweep(BASE, space, cpus=4)
    assert spec.trials_in_parallel == 3 and spec.cpus == 4.0
    two_workers = load_config(None, {**SMALL_CARTPOLE, "budget.generations": 2})
    two_workers = apply_overrides(two_workers, {"evaluator.workers": 2})
    with pytest.raises(ConfigError, match="needs 6 CPUs, 4 are available"):
        plan_sweep(two_workers, space, cpus=4)


def test_the_metrics_of_a_run_come_from_its_metrics_rows() -> None:
    rows = [
        {"best": "3", "mean": "1", "elite_score": "2", "test_mean": ""},
        {"best": "nan", "mean": "1", "elite_score": "", "test_mean": ""},
        {"best": "2", "mean": "1", "elite_score": "4", "test_mean": "7"},
    ]
    assert row_metrics(rows[:1]) == {"test_return": 2.0, "best_return": 3.0}
    assert row_metrics(rows[:2]) == {"test_return": 1.0, "best_return": 3.0}
    assert row_metrics(rows) == {"test_return": 7.0, "best_return": 3.0}


def test_the_table_ranks_configurations_by_their_mean_over_seeds() -> None:
    def row(sigma: float, seed: int, value: float, status: str = "finished") -> dict:
        return {"algorithm.es.sigma": sigma, "seed": seed, "status": status, "final_m": value}

    results = [
        row(0.1, 0, 1.0),
        row(0.1, 1, 3.0),
        row(0.2, 0, 5.0),
        row(0.2, 1, math.nan, "failed"),
        row(0.3, 0, 0.0),
    ]
    lines = best_table(results, ["algorithm.es.sigma", "seed"], "m").splitlines()
    assert lines[0].split()[:2] == ["algorithm.es.sigma", "m"]
    assert [line.split()[:4] for line in lines[1:]] == [
        ["0.2", "5", "±", "0"],
        ["0.1", "2", "±", "1"],
        ["0.3", "0", "±", "0"],
    ]
