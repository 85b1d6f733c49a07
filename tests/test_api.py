"""The short API: ``neuroevo.train`` and ``neuroevo.optimize``, and the README's examples of
them (run as doctests)."""

from __future__ import annotations

import doctest
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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
        ({"dims": 2, "generations": 0}, ValueError, "generations must be >= 1"),
        ({"dims": 2, "population_size": 3}, ValueError, "population_size"),
    ],
)
def test_optimize_rejects_bad_arguments(kwargs, error, pattern) -> None:
    with pytest.raises(error, match=pattern):
        ne.optimize(lambda x: x.sum(axis=1), **kwargs)


def test_optimize_rejects_a_fitness_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match="must return one value per row"):
        ne.optimize(lambda x: x.sum(), 3, "es", population_size=4)


def test_train_rejects_bad_overrides_before_running(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"model\.lstm\.units: 0 must be >= 1"):
        ne.train(REPO / "configs" / "lstm_cartpole_no_velocity.yaml", {"model.lstm.units": 0})
    with pytest.raises(ValueError, match=r"unknown key 'budget\.generationz'"):
        ne.train(REPO / "configs" / "lstm_cartpole_no_velocity.yaml", {"budget.generationz": 1})
