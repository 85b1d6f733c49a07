"""PGPE, SNES, xNES, CEM, sep-CMA-ES, CMA-ES, ARS and MAP-Elites against independent references:
one ask/tell step recomputed here from the papers' formulas (reading the samples back from the
decoded weights, not from the strategies' internals), convergence on standard functions
against the published behaviour and, for the CMA-ES family, against the ``cma`` package."""

from __future__ import annotations

import math

import numpy as np
import pytest

from neuroevo.algorithms import make_algorithm
from neuroevo.algorithms.optimizers import adam_step, clipup_step, momentum_step
from neuroevo.genomes.genome import ESGenome, GenomeDecoder, pack_genomes, unpack_genomes
from neuroevo.genomes.noise import NoiseTable

SEED = 20261204


@pytest.fixture(scope="module")
def noise() -> NoiseTable:
    return NoiseTable(seed=5, size=1_000_000, cache_dir=False)


def one_step(algorithm, fitness: np.ndarray | None = None, seed: int = SEED):
    """Asks once, returns (samples float64 [n, P], fitness [n], mean before); tells ``fitness``
    (fresh random values if None)."""
    mean = np.array(algorithm.center, np.float64)
    request = algorithm.ask()
    samples = algorithm.decoder.decode_batch(request.genomes).astype(np.float64)
    if fitness is None:
        fitness = np.random.default_rng(seed).normal(size=len(samples))
    algorithm.tell(request, fitness[:, None])
    return samples, fitness, mean


def ranks_best_first(fitness: np.ndarray) -> np.ndarray:
    """Rank of each sample, 0 for the best (fitness has no ties here)."""
    return np.argsort(np.argsort(-fitness))


# Genomes and optimizers.


def test_scaled_es_genome_decodes_and_packs(noise: NoiseTable) -> None:
    rng = np.random.default_rng(SEED)
    decoder = GenomeDecoder(noise, np.ones(7, np.float32))
    center, scale = rng.normal(size=7).astype(np.float32), rng.random(7).astype(np.float32)
    decoder.set_center(4, center, keep=4)
    decoder.set_center(5, scale, keep=4)
    genome = ESGenome(4, 1234, -1, 0.5, scale_id=5)
    expected = center + (-0.5 * noise.get(1234, 7).astype(np.float64)) * scale
    np.testing.assert_allclose(decoder.decode(genome), expected, rtol=1e-6)
    genomes = (genome, ESGenome(4, 9, 1, 0.1))
    assert unpack_genomes(pack_genomes(genomes)) == genomes
    old = {k: v for k, v in pack_genomes(genomes).items() if k != "scale_id"}
    assert [g.scale_id for g in unpack_genomes(old)] == [-1, -1]


def test_optimizer_steps_follow_their_formulas() -> None:
    rng = np.random.default_rng(SEED)
    g, v0 = rng.normal(size=5), rng.normal(size=5)
    step, _ = clipup_step(g, v0, 0.3, 0.9, 1e9)
    np.testing.assert_allclose(step, 0.9 * v0 + 0.3 * g / np.linalg.norm(g))
    step, _ = clipup_step(g, v0, 0.3, 0.9, 0.1)
    assert abs(np.linalg.norm(step) - 0.1) < 1e-12
    step, _ = momentum_step(g, v0, 0.01, 0.5)
    np.testing.assert_allclose(step, 0.5 * v0 + 0.01 * g)
    m, s = np.zeros(5), np.zeros(5)
    step, m, s = adam_step(g, m, s, 1, 0.01, 0.9, 0.999, 1e-8)
    rate = 0.01 * math.sqrt(1 - 0.999) / (1 - 0.9)
    np.testing.assert_allclose(step, rate * 0.1 * g / (np.sqrt(0.001 * g * g) + 1e-8))


@pytest.mark.parametrize("optimizer", ["clipup", "sgd", "adam"])
def test_es_takes_any_optimizer(optimizer: str, noise: NoiseTable) -> None:
    es = make_algorithm(
        "es",
        num_params=20,
        scales=1.0,
        noise=noise,
        population_size=10,
        optimizer=optimizer,
        learning_rate=0.05,
        max_speed=0.07,
        center_episodes=0,
        l2_coeff=0.0,
    )
    before = np.array(es.center)
    for _ in range(3):
        one_step(es)
    moved = np.linalg.norm(np.array(es.center) - before)
    assert moved > 0
    if optimizer == "clipup":
        assert moved <= 3 * 0.07 + 1e-6


# One step of each strategy against its paper's formulas.


def test_pgpe_step_is_symmetric_pgpe_with_clipup(noise: NoiseTable) -> None:
    p = 6
    pgpe = make_algorithm(
        "pgpe",
        num_params=p,
        scales=1.0,
        noise=noise,
        seed=3,
        population_size=8,
        sigma=0.2,
        learning_rate=0.3,
        max_speed=0.25,
        center_episodes=0,
    )
    samples, fitness, mean = one_step(pgpe)
    eps = samples[0::2] - mean
    np.testing.assert_allclose(samples[1::2], mean - eps, atol=1e-6)
    ranks = np.argsort(np.argsort(fitness)) / (len(fitness) - 1) - 0.5
    plus, minus = ranks[0::2], ranks[1::2]
    sigma = np.full(p, 0.2)
    grad_m = ((plus - minus) / 2) @ eps / len(eps)
    grad_s = ((plus + minus) / 2) @ ((eps**2 - sigma**2) / sigma) / len(eps)
    velocity = 0.3 * grad_m / np.linalg.norm(grad_m)
    velocity *= min(1.0, 0.25 / np.linalg.norm(velocity))
    np.testing.assert_allclose(pgpe.center, mean + velocity, atol=1e-5)
    expected_sigma = np.clip(sigma + 0.1 * grad_s, 0.8 * sigma, 1.2 * sigma)
    np.testing.assert_allclose(pgpe._state.std, expected_sigma, atol=1e-5)


def test_pgpe_radius_init_sets_the_norm_of_sigma(noise: NoiseTable) -> None:
    pgpe = make_algorithm("pgpe", num_params=50, scales=1.0, noise=noise, radius_init=2.25)
    assert abs(np.linalg.norm(pgpe._state.std) - 2.25) < 1e-9


@pytest.mark.parametrize("top", [None, 3])
def test_ars_step_is_the_papers_update(top: int | None, noise: NoiseTable) -> None:
    """Mania et al. 2018, Algorithm 2: M += alpha / (b sigma_R) sum_top (r+ - r-) delta, the b
    directions with the largest max(r+, r-), sigma_R the std of their 2b returns; from M = 0."""
    p, directions, nu, alpha = 7, 5, 0.03, 0.02
    ars = make_algorithm(
        "ars",
        num_params=p,
        scales=1.0,
        noise=noise,
        seed=4,
        population_size=2 * directions,
        top_directions=top,
        sigma=nu,
        learning_rate=alpha,
        center_episodes=0,
    )
    np.testing.assert_array_equal(ars.center, np.zeros(p))
    samples, fitness, mean = one_step(ars)
    delta = (samples[0::2] - mean) / nu
    np.testing.assert_allclose(samples[1::2], mean - nu * delta, atol=1e-6)
    plus, minus = fitness[0::2], fitness[1::2]
    b = directions if top is None else top
    order = sorted(range(directions), key=lambda k: -max(plus[k], minus[k]))[:b]
    used = [plus[k] for k in order] + [minus[k] for k in order]
    sigma_r = float(np.std(used))
    step = sum((plus[k] - minus[k]) * delta[k] for k in order) * alpha / (b * sigma_r)
    np.testing.assert_allclose(ars.center, mean + step, atol=1e-5)


def test_ars_does_not_move_when_the_kept_returns_are_equal(noise: NoiseTable) -> None:
    ars = make_algorithm(
        "ars", num_params=4, scales=1.0, noise=noise, population_size=8, center_episodes=0
    )
    one_step(ars, fitness=np.full(8, 3.0))
    np.testing.assert_array_equal(ars.center, np.zeros(4))


def test_snes_step_follows_the_nes_formulas(noise: NoiseTable) -> None:
    p, n = 5, 9
    snes = make_algorithm(
        "snes",
        num_params=p,
        scales=1.0,
        noise=noise,
        seed=4,
        population_size=n,
        sigma=0.3,
        center_episodes=0,
    )
    samples, fitness, mean = one_step(snes)
    z = (samples - mean) / 0.3
    raw = [max(0.0, math.log(n / 2 + 1) - math.log(k + 1)) for k in range(n)]
    utility = np.array([raw[r] / sum(raw) - 1 / n for r in ranks_best_first(fitness)])
    eta_s = (3 + math.log(p)) / (5 * math.sqrt(p))
    np.testing.assert_allclose(snes.center, mean + 0.3 * utility @ z, atol=1e-5)
    expected_std = 0.3 * np.exp(eta_s / 2 * (utility @ (z**2 - 1)))
    np.testing.assert_allclose(snes._state.std, expected_std, rtol=1e-4)


def test_cem_refits_mean_and_std_to_the_elites(noise: NoiseTable) -> None:
    cem = make_algorithm(
        "cem",
        num_params=4,
        scales=1.0,
        noise=noise,
        seed=5,
        population_size=20,
        sigma=0.5,
        elite_fraction=0.25,
        center_episodes=0,
    )
    samples, fitness, _ = one_step(cem)
    elites = samples[np.argsort(-fitness)[:5]]
    np.testing.assert_allclose(cem.center, elites.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(cem._state.std, elites.std(axis=0), atol=1e-5)


def tutorial_constants(n: int, lam: int) -> dict[str, float | np.ndarray]:
    """Hansen's tutorial (arXiv:1604.00772), Table 1 and eq. (49)-(58), positive weights."""
    mu = lam // 2
    w = np.array([math.log((lam + 1) / 2) - math.log(i) for i in range(1, mu + 1)])
    w /= w.sum()
    mueff = 1 / (w**2).sum()
    cs = (mueff + 2) / (n + mueff + 5)
    return {
        "w": w,
        "mueff": mueff,
        "cs": cs,
        "ds": 1 + 2 * max(0, math.sqrt((mueff - 1) / (n + 1)) - 1) + cs,
        "cc": (4 + mueff / n) / (n + 4 + 2 * mueff / n),
        "c1": 2 / ((n + 1.3) ** 2 + mueff),
        "cmu": min(
            1 - 2 / ((n + 1.3) ** 2 + mueff),
            2 * (mueff - 2 + 1 / mueff) / ((n + 2) ** 2 + mueff),
        ),
        "chi": math.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n**2)),
    }


@pytest.mark.parametrize("name", ["cma_es", "sep_cma_es"])
def test_cma_first_step_follows_the_tutorial(name: str, noise: NoiseTable) -> None:
    n, lam, sigma = 4, 8, 0.4
    cma = make_algorithm(
        name,
        num_params=n,
        scales=1.0,
        noise=noise,
        seed=6,
        population_size=lam,
        sigma=sigma,
        center_episodes=0,
    )
    samples, fitness, mean = one_step(cma)
    c = tutorial_constants(n, lam)
    c1, cmu = c["c1"], c["cmu"]
    if name == "sep_cma_es":  # Ros & Hansen 2008
        c1, cmu = c1 * (n + 2) / 3, min(cmu * (n + 2) / 3, 1 - c1 * (n + 2) / 3)
    y = (samples[np.argsort(-fitness)[: lam // 2]] - mean) / sigma  # C = I: C^-1/2 y = y
    yw = c["w"] @ y
    np.testing.assert_allclose(cma.center, mean + sigma * yw, atol=2e-6)
    ps = math.sqrt(c["cs"] * (2 - c["cs"]) * c["mueff"]) * yw
    new_sigma = sigma * math.exp(c["cs"] / c["ds"] * (np.linalg.norm(ps) / c["chi"] - 1))
    assert abs(cma._state.sigma - new_sigma) < 1e-5 * sigma
    hs = np.linalg.norm(ps) / math.sqrt(1 - (1 - c["cs"]) ** 2) < (1.4 + 2 / (n + 1)) * c["chi"]
    pc = hs * math.sqrt(c["cc"] * (2 - c["cc"]) * c["mueff"]) * yw
    cov = (1 + c1 * (1 - hs) * c["cc"] * (2 - c["cc"]) - c1 - cmu) * np.eye(n)
    cov += c1 * np.outer(pc, pc) + cmu * sum(
        wi * np.outer(yi, yi) for wi, yi in zip(c["w"], y, strict=True)
    )
    got = cma._state.cov if name == "cma_es" else np.diag(cma._state.cov)
    want = cov if name == "cma_es" else np.diag(np.diag(cov))
    np.testing.assert_allclose(got, want, atol=1e-5)


def series_expm(matrix: np.ndarray) -> np.ndarray:
    """exp(matrix) by its Taylor series (independent of the eigendecomposition used)."""
    result, term = np.eye(len(matrix)), np.eye(len(matrix))
    for k in range(1, 40):
        term = term @ matrix / k
        result = result + term
    return result


def test_xnes_step_follows_the_paper(noise: NoiseTable) -> None:
    n, lam, sigma = 3, 7, 0.5
    xnes = make_algorithm(
        "xnes",
        num_params=n,
        scales=1.0,
        noise=noise,
        seed=7,
        population_size=lam,
        sigma=sigma,
        center_episodes=0,
    )
    samples, fitness, mean = one_step(xnes)
    z = (samples - mean) / sigma  # B = I
    raw = [max(0.0, math.log(lam / 2 + 1) - math.log(k + 1)) for k in range(lam)]
    u = np.array([raw[r] / sum(raw) - 1 / lam for r in ranks_best_first(fitness)])
    g_m = u @ z
    g_cov = sum(ui * (np.outer(zi, zi) - np.eye(n)) for ui, zi in zip(u, z, strict=True))
    g_s = np.trace(g_cov) / n
    eta = 3 * (3 + math.log(n)) / (5 * n * math.sqrt(n))
    np.testing.assert_allclose(xnes.center, mean + sigma * g_m, atol=2e-6)
    assert abs(xnes._state.sigma - sigma * math.exp(eta / 2 * g_s)) < 1e-6
    basis = series_expm(eta / 2 * (g_cov - g_s * np.eye(n)))
    np.testing.assert_allclose(xnes._state.basis, basis, atol=1e-6)
    assert abs(np.linalg.det(xnes._state.basis) - 1) < 1e-9


def test_full_cma_refuses_a_covariance_that_does_not_fit(noise: NoiseTable) -> None:
    with pytest.raises(ValueError, match="use sep_cma_es or snes"):
        make_algorithm("cma_es", num_params=200_000, scales=0.0, noise=noise)
    with pytest.raises(ValueError, match="max_memory_gb"):
        make_algorithm("xnes", num_params=20_000, scales=0.0, noise=noise, max_memory_gb=1.0)


# Convergence on standard functions.


def sphere(x: np.ndarray) -> float:
    return float(np.sum((x - 1) ** 2))


def ellipsoid(x: np.ndarray) -> float:
    n = len(x)
    return float(np.sum(10 ** (6 * np.arange(n) / (n - 1)) * (x - 1) ** 2))


def rosenbrock(x: np.ndarray) -> float:
    return float(np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))


def rastrigin(x: np.ndarray) -> float:
    return float(10 * len(x) + np.sum((x - 1) ** 2 - 10 * np.cos(2 * np.pi * (x - 1))))


def evals_to_reach(
    name: str,
    function,
    dims: int,
    noise: NoiseTable,
    seed: int,
    target: float = 1e-8,
    budget: int = 100_000,
    **params,
) -> int | None:
    """Evaluations until the best sample of a generation is below ``target`` (minimising
    ``function`` from x0 = 0), or None within ``budget``."""
    params = {"population_size": 4 + int(3 * math.log(dims)), "sigma": 0.5} | params
    algorithm = make_algorithm(
        name, num_params=dims, scales=0.0, noise=noise, seed=seed, center_episodes=0, **params
    )
    evaluations = 0
    while evaluations < budget:
        request = algorithm.ask()
        x = algorithm.decoder.decode_batch(request.genomes).astype(np.float64)
        values = np.array([function(row) for row in x])
        algorithm.tell(request, -values[:, None])
        evaluations += len(x)
        if values.min() < target:
            return evaluations
    return None


def pycma_evals(function, dims: int, seed: int, diagonal: bool, target: float = 1e-8) -> int:
    cma = pytest.importorskip("cma")
    options = {
        "CMA_active": False,  # positive weights only, as ours
        "CMA_diagonal": diagonal,
        "seed": seed + 1,
        "verbose": -9,
        "ftarget": target,
    }
    es = cma.CMAEvolutionStrategy(np.zeros(dims), 0.5, options)
    while not es.stop():
        x = es.ask()
        es.tell(x, [function(np.asarray(row)) for row in x])
    return es.result.evaluations


@pytest.mark.parametrize(
    ("name", "function"),
    [("cma_es", sphere), ("cma_es", ellipsoid), ("sep_cma_es", sphere), ("sep_cma_es", ellipsoid)],
)
def test_cma_family_matches_the_cma_package(name, function, noise: NoiseTable) -> None:
    """Mean evaluations to 1e-8 over 2 seeds within 20% of pycma's (sphere ~1300, ellipsoid
    ~5700 full / ~3000 diagonal in 10-D, as in Hansen's tutorial and pycma)."""
    ours = [evals_to_reach(name, function, 10, noise, seed) for seed in range(2)]
    assert None not in ours, ours
    theirs = [pycma_evals(function, 10, seed, name == "sep_cma_es") for seed in range(2)]
    print(name, function.__name__, ours, theirs)
    assert abs(np.mean(ours) / np.mean(theirs) - 1) < 0.2, (ours, theirs)


def test_cma_es_solves_rosenbrock_like_the_cma_package(noise: NoiseTable) -> None:
    """10-D Rosenbrock to 1e-8: pycma needs about 6000 evaluations."""
    ours = evals_to_reach("cma_es", rosenbrock, 10, noise, seed=0, budget=20_000)
    assert ours is not None and 3000 < ours < 10_000, ours


def test_cma_es_with_a_large_population_finds_the_rastrigin_optimum(noise: NoiseTable) -> None:
    """Hansen & Kern 2004: on 10-D Rastrigin, lambda ~ 100-200 reaches the global optimum."""
    evals = evals_to_reach(
        "sep_cma_es",
        rastrigin,
        10,
        noise,
        seed=1,
        target=1e-8,
        budget=150_000,
        population_size=200,
        sigma=2.0,
    )
    assert evals is not None, "stuck in a local optimum"


@pytest.mark.parametrize(
    ("name", "low", "high", "params"),
    [
        ("snes", 800, 4000, {}),  # Schaul et al. 2011: ~2x sep-CMA-ES on the sphere
        ("xnes", 2000, 12_000, {}),  # Glasmachers et al. 2010: a few thousand in 10-D
        # Started wide enough (sigma ~ distance / 3): see the next test for a narrow start.
        ("cem", 1000, 20_000, {"population_size": 100, "elite_fraction": 0.3, "sigma": 1.0}),
    ],
)
def test_nes_and_cem_reach_1e8_on_the_sphere(name, low, high, params, noise) -> None:
    evals = evals_to_reach(name, sphere, 10, noise, seed=1, **params)
    print(name, evals)
    assert evals is not None and low < evals < high, evals


def test_cem_with_few_elites_collapses_early(noise: NoiseTable) -> None:
    """The known weakness of CEM / EMNA-global (Hansen's tutorial, Sec. 3.1): refitted to 10
    of 100 samples in 10-D, the std shrinks faster than the mean moves and the search stalls
    well above the optimum, unless ``extra_std`` keeps it open."""
    assert evals_to_reach("cem", sphere, 10, noise, 2, population_size=100, budget=10_000) is None
    evals = evals_to_reach(
        "cem",
        sphere,
        10,
        noise,
        2,
        target=1e-3,
        population_size=100,
        extra_std=1e-3,
        budget=30_000,
    )
    assert evals is not None


def test_pgpe_with_clipup_descends_a_100d_sphere_at_bounded_speed(noise: NoiseTable) -> None:
    """ClipUp moves the centre at most ``max_speed`` per generation, so from distance 10 it
    needs at least 10 / max_speed generations."""
    pgpe = make_algorithm(
        "pgpe",
        num_params=100,
        scales=0.0,
        noise=noise,
        seed=3,
        population_size=100,
        sigma=0.3,
        learning_rate=0.25,
        max_speed=0.5,
        center_episodes=0,
    )
    distances = []
    for _ in range(150):
        request = pgpe.ask()
        x = pgpe.decoder.decode_batch(request.genomes).astype(np.float64)
        pgpe.tell(request, -np.array([[sphere(row)] for row in x]))
        distances.append(np.linalg.norm(np.array(pgpe.center) - 1))
    assert np.all(np.diff([10.0, *distances]) >= -0.5 - 1e-6)
    # Then it hovers at a distance set by the fixed step size (ClipUp does not anneal).
    assert distances[18] > 0.5 and max(distances[40:]) < 2.5


def test_pgpe_with_adam_reaches_1e8_on_the_sphere(noise: NoiseTable) -> None:
    evals = evals_to_reach(
        "pgpe",
        sphere,
        10,
        noise,
        1,
        population_size=50,
        optimizer="adam",
        learning_rate=0.05,
        stdev_learning_rate=0.2,
    )
    assert evals is not None and evals < 50_000, evals


# MAP-Elites.


def test_map_elites_inserts_the_best_per_cell(noise: NoiseTable) -> None:
    me = make_algorithm(
        "map_elites",
        num_params=3,
        scales=1.0,
        noise=noise,
        population_size=5,
        cells=(2, 2),
        behavior_low=(0.0, 0.0),
        behavior_high=(1.0, 1.0),
        qd_score_offset=-10.0,
    )
    request = me.ask()
    behaviors = np.array([[0.1, 0.1], [0.2, 0.3], [0.9, 0.1], [2.0, 2.0], [0.6, 0.6]])
    returns = np.array([-1.0, -0.5, -3.0, -2.0, np.nan])
    with pytest.warns(RuntimeWarning, match="1 of 5 genomes had NaN"):
        summary = me.tell(request, returns[:, None], behaviors=behaviors[:, None, :])
    weights = me.decoder.decode_batch(request.genomes)
    state = me._state
    # cells: (0,0) <- best of genomes 0 and 1; (1,0) <- 2; (1,1) <- 3 (clipped); NaN skipped
    np.testing.assert_array_equal(state.fitness, [-0.5, np.nan, -3.0, -2.0])
    np.testing.assert_array_equal(state.elites[0], weights[1])
    assert summary.extras["coverage"] == 0.75 and summary.extras["qd_score"] == 30 - 5.5
    assert summary.elite_score == -0.5
    np.testing.assert_array_equal(me.decoder.decode(me.elite), weights[1])


def test_map_elites_iso_line_children(noise: NoiseTable) -> None:
    me = make_algorithm(
        "map_elites",
        num_params=4,
        scales=1.0,
        noise=noise,
        population_size=4,
        cells=(4,),
        behavior_low=(0.0,),
        behavior_high=(1.0,),
        line_sigma=0.2,
        mutation_sigma=0.01,
    )
    request = me.ask()
    me.tell(request, np.zeros((4, 1)), behaviors=np.array([[[0.1]], [[0.3]], [[0.6]], [[0.9]]]))
    elites = me._state.elites.astype(np.float64)
    children = me.ask().genomes
    for child in children:
        base = me.decoder.center(child.center_id).astype(np.float64)
        # base = x_i + c (x_j - x_i): on a line through two elites
        on_line = [
            np.linalg.matrix_rank(np.stack([base - elites[i], elites[j] - elites[i]]), 1e-5) <= 1
            for i in range(4)
            for j in range(4)
        ]
        assert any(on_line)
        eps = noise.get(child.noise_index, 4)
        np.testing.assert_allclose(me.decoder.decode(child), base + 0.01 * eps, atol=1e-6)


def test_map_elites_fills_a_grid(noise: NoiseTable) -> None:
    me = make_algorithm(
        "map_elites",
        num_params=6,
        scales=0.1,
        noise=noise,
        population_size=20,
        cells=(5, 5),
        behavior_low=(-1.0, -1.0),
        behavior_high=(1.0, 1.0),
        mutation_sigma=0.3,
    )
    coverage = []
    for _ in range(40):
        request = me.ask()
        x = me.decoder.decode_batch(request.genomes)
        returns = -np.sum(x.astype(np.float64) ** 2, axis=1, keepdims=True)
        summary = me.tell(request, returns, behaviors=x[:, None, :2])
        coverage.append(summary.extras["coverage"])
    assert coverage == sorted(coverage) and coverage[-1] > 0.9
