"""The short API: ``neuroevo.train`` and ``neuroevo.optimize``, and the README's examples of
them (run as doctests)."""

from __future__ import annotations

import doctest
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from run_helpers import SMALL_CARTPOLE

import neuroevo as ne

REPO = Path(__file__).resolve().parents[1]


def test_importing_neuroevo_imports_no_tensorflow() -> None:
    code = (
        "import sys, neuroevo as ne; ne.optimize; ne.train; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_readme_examples_run(monkeypatch) -> None:
    monkeypatch.chdir(REPO)  # the examples name configs/ relative to the checkout
    failed, attempted = doctest.testfile(
        str(REPO / "README.md"), module_relative=False, optionflags=doctest.ELLIPSIS
    )
    assert attempted >= 10 and failed == 0


@pytest.mark.parametrize("algorithm", ["es", "ga", "random_search"])
def test_optimize_minimises_and_maximises_with_any_algorithm(algorithm) -> None:
    seed = 5
    target = np.random.default_rng(seed).uniform(-1, 1, 4).astype(np.float32)
    hyper = {
        "es": {"population_size": 20, "sigma": 0.1, "learning_rate": 0.1, "l2_coeff": 0.0},
        "ga": {
            "population_size": 30,
            "truncation": 5,
            "mutation_power": 0.1,
            "validation_candidates": 2,
            "validation_episodes": 1,
        },
        "random_search": {
            "population_size": 200,
            "validation_candidates": 2,
            "validation_episodes": 1,
        },
    }[algorithm]
    calls = []

    def distance(x):
        calls.append(x.shape)
        return np.abs(x - target).sum(axis=1)

    low = ne.optimize(
        distance, 4, algorithm, minimize=True, generations=40, seed=seed, init_std=0.5, **hyper
    )
    start = float(np.abs(target).sum())  # the distance of the zero vector
    assert low.value < 0.5 * start, f"seed {seed}"
    assert low.value == pytest.approx(float(distance(low.x[None])[0]))
    assert all(len(shape) == 2 and shape[1] == 4 for shape in calls)  # batched calls
    assert low.summaries[-1].best <= 0  # summaries score the maximised objective, -distance
    high = ne.optimize(
        lambda x: -distance(x), 4, algorithm, generations=40, seed=seed, init_std=0.5, **hyper
    )
    assert -high.value < 0.5 * start


def test_optimize_one_vector_at_a_time_and_novelty_search() -> None:
    one = ne.optimize(
        lambda x: float(x @ x),
        3,
        "es",
        minimize=True,
        batch=False,
        generations=30,
        population_size=10,
        sigma=0.1,
        learning_rate=0.1,
        l2_coeff=0.0,
    )
    assert one.value < 0.5

    def with_behaviour(x):  # novelty search needs a behaviour per row
        return -np.abs(x).sum(axis=1), x[:, :2]

    novel = ne.optimize(with_behaviour, 3, "ns_es", generations=3, population_size=10)
    assert len(novel.summaries) == 3


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"dims": 0}, ValueError, "dims must be a positive integer"),
        ({"dims": 2, "algorithm": "nope"}, ValueError, "nope"),
        ({"dims": 2, "generations": 0}, ValueError, "generations must be a positive integer"),
        ({"dims": 2, "generations": float("nan")}, ValueError, "generations must be a positive"),
        ({"dims": 2, "generations": "3"}, ValueError, "generations must be a positive integer"),
        ({"dims": 2, "generations": 2.0}, ValueError, "generations must be a positive integer"),
        ({"dims": 2, "population_size": 3}, ValueError, "population_size"),
        # Refused before any allocation (GA and CMA-ES allocate per genome when built).
        ({"dims": 2, "population_size": 1e12}, ValueError, "a generation of 1,000,000,000,000"),
        (
            {"dims": 2, "algorithm": "ga", "population_size": 10**12, "truncation": 2},
            ValueError,
            "lower population_size",
        ),
    ],
)
def test_optimize_rejects_bad_arguments(kwargs, error, pattern) -> None:
    with pytest.raises(error, match=pattern):
        ne.optimize(lambda x: x.sum(axis=1), **kwargs)


def test_optimize_rejects_a_fitness_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match="must return one value per row"):
        ne.optimize(lambda x: x.sum(), 3, "es", population_size=4)


@pytest.mark.parametrize("batch", [True, False], ids=["batch", "one-by-one"])
@pytest.mark.parametrize("algorithm", ["ns_es", "map_elites"])
def test_optimize_needs_behaviours_from_a_novelty_or_qd_function(algorithm, batch) -> None:
    """Only values (no behaviours) is named, never "too many values to unpack"; two rows of
    values are not mistaken for a (values, behaviours) pair."""

    def values(x):
        return x.sum(axis=-1)

    with pytest.raises(ValueError, match=r"needs behaviours: return \(values, behaviours\)"):
        ne.optimize(values, 3, algorithm, batch=batch, generations=1, population_size=2)


def test_optimize_refuses_complex_or_non_numeric_returns() -> None:
    with pytest.raises(ValueError, match="fn returned complex values; return real numbers"):
        ne.optimize(lambda x: x.sum(axis=1) + 1j, 3, "es", population_size=4, generations=1)
    with pytest.raises(ValueError, match="fn returned values that are not numbers"):
        ne.optimize(lambda x: ["a"] * len(x), 3, "es", population_size=4, generations=1)

    def complex_behaviour(x):
        return x.sum(axis=1), x[:, :2] * 1j

    with pytest.raises(ValueError, match="fn returned complex behaviours"):
        ne.optimize(complex_behaviour, 3, "ns_es", population_size=4, generations=1)


def test_train_rejects_bad_overrides_before_running(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"model\.lstm\.units: 0 must be >= 1"):
        ne.train(REPO / "configs" / "lstm_cartpole_no_velocity.yaml", {"model.lstm.units": 0})
    with pytest.raises(ValueError, match=r"unknown key 'budget\.generationz'"):
        ne.train(REPO / "configs" / "lstm_cartpole_no_velocity.yaml", {"budget.generationz": 1})


def test_train_takes_override_values_as_they_are(tmp_path, monkeypatch) -> None:
    """Values from a notebook loop (numpy scalars and arrays, tuples, paths) are used as the
    numbers, lists and strings they hold; an infinite float, an int config and a bad key
    are clear errors; a bytes or PathLike run_dir works."""
    overrides = {
        **SMALL_CARTPOLE,
        "budget.generations": np.int64(1),
        "seed": np.uint8(3),
        "model.mlp.hidden_sizes": np.array([4]),
        "algorithm.es.sigma": np.float32(0.5),
        "noise.cache_dir": tmp_path / "noise",
    }
    run_dir = tmp_path / "run"
    result = ne.train({"budget": {"generations": 1}}, overrides, run_dir=os.fsencode(run_dir))
    assert result.run_dir == run_dir and (run_dir / "metrics.csv").is_file()
    assert result.config.seed == 3 and result.config.model.mlp.hidden_sizes == (4,)
    assert result.config.algorithm.es.sigma == pytest.approx(0.5)
    assert result.config.noise.cache_dir == str(tmp_path / "noise")
    with pytest.raises(ValueError, match=r"budget\.hours: inf must be a finite number"):
        ne.train({"budget": {"generations": 1}}, {"budget.hours": float("inf")})
    with pytest.raises(TypeError, match="config must be a YAML file path, a mapping"):
        ne.train(5)
    with pytest.raises(ValueError, match="override key 3 must be a dotted key"):
        ne.train({"budget": {"generations": 1}}, {3: 1})
    with pytest.raises(TypeError, match="run_dir must be a path or None, got int"):
        ne.train({"budget": {"generations": 1}}, SMALL_CARTPOLE, run_dir=7)
