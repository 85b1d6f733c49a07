"""CMA-ME and CMA-MAE against their papers: one generation recomputed here by hand (the
archive insertion in sample order, the improvement ranking, CMA-MAE's threshold annealing,
each emitter's CMA-ES step from Hansen's tutorial), the restart rules, and quality diversity
on plain functions through ``ne.optimize`` (``measures=``, ``archive=``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import neuroevo as ne
from neuroevo.algorithms import make_algorithm
from neuroevo.algorithms.cma_me import emitter_sizes
from neuroevo.genomes.noise import NoiseTable

SEED = 20261207


@pytest.fixture(scope="module")
def noise() -> NoiseTable:
    return NoiseTable(seed=3, size=200_000, cache_dir=False)


GRID = {"cells": (3, 3), "behavior_low": (0.0, 0.0), "behavior_high": (3.0, 3.0)}


def cell_center(cell: int) -> list[float]:
    """A behaviour inside flat cell ``cell`` of the 3 x 3 grid over [0, 3]^2."""
    return [cell // 3 + 0.5, cell % 3 + 0.5]


def cma_step(y: np.ndarray, w: np.ndarray, sigma: float, n: int) -> dict[str, np.ndarray]:
    """The first CMA-ES update from C = I, zero paths (Hansen 2016, arXiv:1604.00772, eq.
    (39)-(47), positive weights ``w`` over the parents' steps ``y = (x - m) / sigma``, best
    first): the mean's step, new sigma and covariance."""
    mueff = 1 / (w**2).sum()
    cs = (mueff + 2) / (n + mueff + 5)
    ds = 1 + 2 * max(0, math.sqrt((mueff - 1) / (n + 1)) - 1) + cs
    cc = (4 + mueff / n) / (n + 4 + 2 * mueff / n)
    c1 = 2 / ((n + 1.3) ** 2 + mueff)
    cmu = min(1 - c1, 2 * (mueff - 2 + 1 / mueff) / ((n + 2) ** 2 + mueff))
    chi = math.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n**2))
    yw = w @ y
    ps = math.sqrt(cs * (2 - cs) * mueff) * yw
    hs = np.linalg.norm(ps) / math.sqrt(1 - (1 - cs) ** 2) < (1.4 + 2 / (n + 1)) * chi
    pc = hs * math.sqrt(cc * (2 - cc) * mueff) * yw
    cov = (1 + c1 * (1 - hs) * cc * (2 - cc) - c1 - cmu) * np.eye(n)
    cov += c1 * np.outer(pc, pc) + cmu * sum(
        wi * np.outer(yi, yi) for wi, yi in zip(w, y, strict=True)
    )
    return {
        "step": sigma * yw,
        "sigma": sigma * math.exp(cs / ds * (np.linalg.norm(ps) / chi - 1)),
        "cov": cov,
    }


def tell_once(algorithm, fitness: np.ndarray, behaviors: np.ndarray):
    """Asks, tells ``fitness`` and ``behaviors``; returns (samples float64 [n, P], summary)."""
    request = algorithm.ask()
    samples = algorithm.decoder.decode_batch(request.genomes).astype(np.float64)
    summary = algorithm.tell(request, fitness[:, None], behaviors=behaviors[:, None, :])
    return samples, summary


def test_emitters_share_the_population_evenly() -> None:
    assert emitter_sizes(540, 15).tolist() == [36] * 15
    assert emitter_sizes(11, 3).tolist() == [4, 4, 3]


def test_cma_me_first_generation_by_hand(noise: NoiseTable) -> None:
    """Two improvement emitters of 6 (Fontaine et al. 2020, Sec. 4): samples go into the
    archive in order; an emitter's parents are its added samples, new cells first by fitness,
    then improved cells by improvement, weighted ln(mu + 1/2) - ln i."""
    n, sigma = 4, 0.3
    me = make_algorithm(
        "cma_me", num_params=n, scales=1.0, noise=noise, seed=2, population_size=12,
        emitters=2, sigma=sigma, qd_score_offset=-10.0, **GRID,
    )  # fmt: skip
    start = me._state.means[0].copy()
    fitness = np.random.default_rng(SEED).normal(size=12)
    print(f"fitness seed {SEED}: {np.round(fitness, 3)}")
    # Emitter 0 fills cells 0-5; emitter 1 improves or not cell 0 and 1, opens 6, then beats
    # its own sample in cell 6, misses in cell 2, opens 7.
    cells = [0, 1, 2, 3, 4, 5, 0, 1, 6, 6, 2, 7]
    fitness[6] = fitness[0] + 0.5
    fitness[7] = fitness[1] - 0.5
    fitness[9] = fitness[8] + 0.25
    fitness[10] = fitness[2] - 1.0
    behaviors = np.array([cell_center(c) for c in cells])
    samples, summary = tell_once(me, fitness, behaviors)
    state = me._state

    best = {}
    for k, cell in enumerate(cells):  # MAP-Elites' rule in sample order
        if cell not in best or fitness[k] > fitness[best[cell]]:
            best[cell] = k
    want = np.full(9, np.nan)
    for cell, k in best.items():
        want[cell] = fitness[k]
        np.testing.assert_array_equal(state.elites[cell], samples[k].astype(np.float32))
    np.testing.assert_array_equal(state.fitness, want)
    assert summary.extras["insertions"] == 10 and summary.extras["restarts"] == 0
    assert summary.extras["coverage"] == 8 / 9
    assert summary.extras["qd_score"] == pytest.approx(np.nansum(want) + 8 * 10)

    parents = [
        np.argsort(-fitness[:6]),  # all new cells, by fitness
        # new cells 6 (sample 8) and 7 (11) by fitness, then improvements of 0 (6) and 6 (9)
        sorted([8, 11], key=lambda k: -fitness[k])
        + sorted([6, 9], key=lambda k: -(fitness[k] - fitness[{6: 0, 9: 8}[k]])),
    ]
    for e, rows in enumerate(parents):
        mu = len(rows)
        w = np.log(mu + 0.5) - np.log(np.arange(1, mu + 1))
        w /= w.sum()
        y = (samples[rows] - start) / sigma  # C = I
        want_step = cma_step(y, w, sigma, n)
        np.testing.assert_allclose(state.means[e], start + want_step["step"], atol=2e-6)
        assert state.sigmas[e] == pytest.approx(want_step["sigma"], rel=1e-6)
        np.testing.assert_allclose(state.cov[e], want_step["cov"], atol=1e-5)


def test_cma_mae_first_generation_by_hand(noise: NoiseTable) -> None:
    """CMA-MAE (Fontaine & Nikolaidis 2023, Algorithm 1): improvement f - t_e against each
    cell's threshold; a positive one moves t_e to (1 - alpha) t_e + alpha f at once (a later
    sample in the cell sees it); each emitter recombines its best half by improvement with the
    tutorial's weights. The archive keeps each cell's best, thresholds or not."""
    n, sigma, alpha, t_min = 3, 0.2, 0.25, 0.5
    mae = make_algorithm(
        "cma_mae", num_params=n, scales=1.0, noise=noise, seed=4, population_size=8,
        emitters=2, sigma=sigma, archive_learning_rate=alpha, threshold_min=t_min, **GRID,
    )  # fmt: skip
    start = mae._state.means[0].copy()
    cells = [0, 0, 1, 2, 0, 3, 3, 1]
    fitness = np.array([1.0, 2.0, 0.25, -1.0, 1.5, 3.0, 0.9, 0.75])
    samples, summary = tell_once(mae, fitness, np.array([cell_center(c) for c in cells]))
    state = mae._state

    thresholds = np.full(9, t_min)
    improvement = np.empty(8)
    for k, cell in enumerate(cells):
        improvement[k] = fitness[k] - thresholds[cell]
        if improvement[k] > 0:
            thresholds[cell] = (1 - alpha) * thresholds[cell] + alpha * fitness[k]
    # e.g. cell 0: 0.5 -> 0.625 (f 1.0) -> 0.96875 (f 2.0); the 1.5 then improves by 0.53
    assert improvement[4] == pytest.approx(1.5 - 0.96875)
    np.testing.assert_allclose(state.thresholds, thresholds)
    want = np.full(9, np.nan)
    want[[0, 1, 2, 3]] = [2.0, 0.75, -1.0, 3.0]  # the best, below its threshold or not
    np.testing.assert_array_equal(state.fitness, want)
    assert summary.extras["insertions"] == 6

    for e in range(2):
        rows = 4 * e + np.argsort(-improvement[4 * e : 4 * e + 4], kind="stable")[:2]
        w = np.log(2.5) - np.log([1.0, 2.0])
        w /= w.sum()
        want_step = cma_step((samples[rows] - start) / sigma, w, sigma, n)
        np.testing.assert_allclose(state.means[e], start + want_step["step"], atol=2e-6)
        assert state.sigmas[e] == pytest.approx(want_step["sigma"], rel=1e-6)
        np.testing.assert_allclose(state.cov[e], want_step["cov"], atol=1e-5)


@pytest.mark.parametrize("name", ["cma_me", "cma_mae"])
def test_emitters_restart_from_an_elite(name: str, noise: NoiseTable) -> None:
    """CMA-ME's emitter that adds nothing restarts; so does any emitter whose samples rank
    flat (pycma's tolflatfitness), here CMA-MAE's on a constant function. A restarted
    emitter samples around an elite with the initial sigma and C = I."""
    algorithm = make_algorithm(
        name, num_params=3, scales=1.0, noise=noise, seed=1, population_size=8, emitters=2,
        sigma=0.2, **GRID,
    )  # fmt: skip
    first = np.zeros(8)
    first[:4] = [1.0, 2.0, 3.0, 4.0]  # emitter 0 fills cells 0-3; emitter 1 adds nothing
    if name == "cma_mae":
        first[:] = 1.0
    cells = [0, 1, 2, 3, 0, 1, 2, 3]
    _, summary = tell_once(algorithm, first, np.array([cell_center(c) for c in cells]))
    state = algorithm._state
    restarted = [1] if name == "cma_me" else [0, 1]
    assert summary.extras["restarts"] == len(restarted)
    assert state.restarts.tolist() == [int(e in restarted) for e in range(2)]
    for e in restarted:
        assert any(np.array_equal(state.means[e], elite) for elite in state.elites[:4])
        assert state.sigmas[e] == 0.2 and state.updates[e] == 0
        np.testing.assert_array_equal(state.cov[e], np.eye(3))


def linear_projection(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sphere with linear projection (Fontaine et al. 2020), in any even dimension:
    objective in [0, 100], measures the sums of the two halves (values folded into
    [-5.12, 5.12])."""
    worst = (-5.12 - 2.048) ** 2 * x.shape[1]
    objective = (np.sum((x - 2.048) ** 2, axis=1) - worst) / -worst * 100
    folded = np.array(x, np.float64)
    outside = np.abs(folded) > 5.12
    folded[outside] = 5.12 / folded[outside]
    half = x.shape[1] // 2
    return objective, np.stack([folded[:, :half].sum(1), folded[:, half:].sum(1)], axis=1)


def test_cma_mae_illuminates_more_than_map_elites() -> None:
    """On a 20-D linear projection, 150 generations of 60: CMA-MAE's QD score is well above
    MAP-Elites' (the ordering of Fontaine & Nikolaidis 2023, Table 1; seed 0 gives about 46
    against 23 percent), and the archive ``ne.optimize`` returns is the grid its summaries
    describe."""
    bound = 10 * 5.12
    common = {
        "measures": lambda x: linear_projection(x)[1],
        "archive": {"dims": [20, 20], "ranges": [[-bound, bound], [-bound, bound]]},
        "generations": 150,
        "population_size": 60,
        "seed": 0,
    }
    objective = lambda x: linear_projection(x)[0]  # noqa: E731
    mae = ne.optimize(objective, 20, "cma_mae", init_std=0.0, emitters=3, **common)
    me = ne.optimize(objective, 20, "map_elites", init_std=0.5, mutation_sigma=0.5, **common)
    scores = {"cma_mae": mae.archive.qd_score, "map_elites": me.archive.qd_score}
    print(f"QD scores: {scores}")
    assert scores["cma_mae"] > 1.5 * scores["map_elites"]
    archive = mae.archive
    assert archive.fitness.shape == (20, 20) and archive.elites.shape == (20, 20, 20)
    filled = np.isfinite(archive.fitness)
    assert archive.coverage == filled.mean() == mae.summaries[-1].extras["coverage"]
    assert archive.qd_score == pytest.approx(archive.fitness[filled].sum())
    values, measures = linear_projection(archive.elites[filled].astype(np.float64))
    np.testing.assert_allclose(values, archive.fitness[filled], rtol=1e-6)
    np.testing.assert_allclose(measures, archive.behaviors[filled], rtol=1e-6)
    assert mae.value == pytest.approx(np.nanmax(archive.fitness), rel=1e-6)


def test_optimize_takes_measures_one_row_at_a_time() -> None:
    """Without ``batch``, ``fn`` and ``measures`` get one vector each; the same run."""

    def objective(x):
        return -float(np.sum(x**2))

    def measures(x):
        return x[:2]

    kwargs = {
        "archive": {"dims": [4, 4], "ranges": [[-1, 1], [-1, 1]]},
        "generations": 3,
        "population_size": 8,
        "emitters": 2,
    }
    one = ne.optimize(objective, 3, "cma_me", batch=False, measures=measures, **kwargs)
    batched = ne.optimize(
        lambda x: -np.sum(x**2, axis=1), 3, "cma_me", measures=lambda x: x[:, :2], **kwargs
    )
    np.testing.assert_array_equal(one.archive.fitness, batched.archive.fitness)


QD = {"algorithm": "cma_mae", "measures": lambda x: x[:, :2], "emitters": 2}
GRID_2D = {"dims": [2, 2], "ranges": [[0, 1], [0, 1]]}


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"algorithm": "es", "archive": GRID_2D}, "grid algorithm"),
        ({"algorithm": "es", "measures": lambda x: x}, "measures= goes with an algorithm"),
        (QD | {"archive": {"dims": [2]}}, r"archive must be \{"),
        (QD | {"archive": {"dims": [2], "ranges": [[0, 1, 2]]}}, r"\[low, high\] pairs"),
        (QD | {"archive": GRID_2D, "cells": [3]}, "give the grid once"),
        (QD | {"archive": {"dims": [2, 2], "ranges": [[1, 0], [0, 1]]}}, "above behavior_low"),
        (QD | {"measures": lambda x: x[:3, :2]}, "behaviours of shape"),
    ],
)
def test_optimize_rejects_a_bad_qd_setup(kwargs, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        ne.optimize(lambda x: x.sum(axis=1), 3, population_size=8, generations=1, **kwargs)
