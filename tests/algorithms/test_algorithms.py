"""Tests for neuroevo.algorithms: every optimizer through one interface, plus what each must
show (ES on a 1000-D sphere and a shifted Rastrigin, GA beating random search), exact
checkpoint resume, determinism, the NaN policy and hyperparameter errors."""

from __future__ import annotations

import io
import itertools

import numpy as np
import pytest
import yaml

from neuroevo.algorithms import (
    ALGORITHMS,
    ES,
    GA,
    ESParams,
    GAParams,
    MutationSchedule,
    Optimizer,
    Phase,
    RandomSearch,
    RandomSearchParams,
    make_algorithm,
    optimize,
)
from neuroevo.algorithms.nan_policy import replace_nonfinite
from neuroevo.algorithms.noise_sums import BLOCK, noise_moments, weighted_noise_sum
from neuroevo.algorithms.shaping import centered_ranks, identity, standardize
from neuroevo.evaluation.results import EvalResults, EvalStats
from neuroevo.genomes.noise import NoiseTable

SEED = 20261207
SMALL = {"population_size": 32}  # Every algorithm's params accept this; the rest stay default.


@pytest.fixture(scope="module")
def noise() -> NoiseTable:
    return NoiseTable(seed=0, size=2_000_000, cache_dir=False)


def sphere(weights: np.ndarray, episode_seed: int) -> float:
    """Sphere centred at 0.5 (any dimension) plus seeded episode noise; maximum about 0."""
    noise = np.random.default_rng(episode_seed).normal(scale=0.01)
    return -float(np.sum((weights - 0.5) ** 2)) + noise


def with_behavior(fitness):
    """``fitness`` returning also a behaviour: the first two weights (for novelty search)."""
    return lambda weights, seed: (fitness(weights, seed), np.array(weights[:2]))


def fitness_for(algorithm: Optimizer, fitness=sphere):
    """``fitness`` in the form ``optimize`` expects for ``algorithm``."""
    return with_behavior(fitness) if algorithm.needs_behavior else fitness


def run(algorithm: Optimizer, fitness=sphere, phases: int = 10**9, generations: int = 10**9):
    """Runs ask/evaluate/tell until ``phases`` tells or ``generations`` summaries; novelty
    algorithms get the first two weights as each episode's behaviour."""
    summaries = []
    for _ in range(phases):
        if len(summaries) == generations:
            break
        request = algorithm.ask()
        weights = algorithm.decoder.decode_batch(request.genomes)
        returns = np.array(
            [
                [fitness(w, int(seed)) for seed in seeds]
                for w, seeds in zip(weights, request.episode_seeds, strict=True)
            ]
        )
        behaviors = np.repeat(weights[:, None, :2], returns.shape[1], axis=1)
        summary = algorithm.tell(request, returns, behaviors=behaviors)
        if summary is not None:
            summaries.append(summary)
    return summaries


# Shaping.


def test_centered_ranks() -> None:
    ranks = centered_ranks(np.array([3.0, -1.0, 10.0, 0.0, 2.0]))
    np.testing.assert_allclose(ranks, [0.25, -0.5, 0.5, -0.25, 0.0])
    assert ranks.sum() == 0 and centered_ranks(np.array([4.0])).tolist() == [0.0]


def test_standardize_and_identity() -> None:
    values = np.array([1.0, 2.0, 3.0, 4.0])
    shaped = standardize(values)
    assert abs(shaped.mean()) < 1e-12 and abs(shaped.std() - 1) < 1e-12
    assert standardize(np.ones(3)).tolist() == [0.0, 0.0, 0.0]
    assert identity(values).tolist() == values.tolist()


def test_replace_nonfinite_makes_them_worst() -> None:
    fitness, count = replace_nonfinite(np.array([1.0, np.nan, 3.0, np.inf, -np.inf]))
    assert count == 3 and np.all(np.isfinite(fitness))
    assert fitness[[1, 3, 4]].max() < 1.0 and fitness[2] == 3.0
    with pytest.raises(ValueError, match="all 2 fitness values are NaN or inf"):
        replace_nonfinite(np.array([np.nan, np.inf]))


# Registry-driven smoke test: every algorithm through the same loop, no special cases.


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_runs_on_2d_problem(name: str, noise: NoiseTable) -> None:
    algorithm = make_algorithm(name, num_params=2, scales=1.0, noise=noise, seed=0, **SMALL)
    assert algorithm.elite_score is None and algorithm.generation == 0
    seen = []
    summaries = optimize(fitness_for(algorithm), algorithm, generations=16, callback=seen.append)
    assert seen == summaries and [s.generation for s in summaries] == list(range(16))
    assert algorithm.generation == 16
    assert all(np.isfinite([s.best, s.mean, s.median]).all() for s in summaries)
    if not algorithm.needs_behavior:  # novelty search trades reward for exploration
        assert summaries[-1].best >= summaries[0].mean
    assert summaries[-1].nan_count == 0
    assert str(summaries[-1]).startswith("gen 15 | best ")
    elite = algorithm.decoder.decode(algorithm.elite)
    assert elite.shape == (2,) and np.all(np.isfinite(elite))


def test_make_algorithm_errors_list_valid_names(noise: NoiseTable) -> None:
    with pytest.raises(ValueError, match="'cmaes' is not one of 'ga', 'es', 'random_search'"):
        make_algorithm("cmaes", num_params=2, scales=1.0, noise=noise)
    with pytest.raises(ValueError, match=r"unknown key 'ga.sigma' \(valid keys here: population_"):
        make_algorithm("ga", num_params=2, scales=1.0, noise=noise, sigma=0.1)


# Bad input.


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: GAParams(population_size=1), "population_size: 1 must be >= 2"),
        (
            lambda: GAParams(population_size=10, validation_candidates=5),
            r"truncation: 20 must be <= population_size \(10",
        ),
        (lambda: GAParams(mutation_power=0.0), "mutation_power: 0.0 must be > 0"),
        (lambda: GAParams(mutation_power=float("nan")), "mutation_power: nan must be a finite"),
        (
            lambda: RandomSearchParams(population_size=5),
            r"validation_candidates: 10 must be 0 \(no validation\) or between 2 and the 4 new",
        ),
        (lambda: RandomSearchParams(population_size=1), "population_size: 1 must be >= 2"),
        (lambda: ESParams(population_size=5001), "must be even when mirrored is true"),
        (lambda: ESParams(sigma=0.0), "sigma: 0.0 must be > 0"),
        (lambda: ESParams(sigma=-1.0), "sigma: -1.0 must be > 0"),
        (lambda: ESParams(learning_rate=float("inf")), "learning_rate: inf must be a finite"),
        (lambda: ESParams(fitness_shaping="ranks"), "fitness_shaping: 'ranks' is not one of"),
        (lambda: ESParams(l2_coeff=-1.0), "l2_coeff: -1.0 must be >= 0"),
        (lambda: ESParams(action_noise_std=-0.1), "action_noise_std: -0.1 must be a finite"),
        (lambda: ESParams(action_noise_std=float("nan")), "action_noise_std: nan must be a"),
        (lambda: ESParams(mirrored=1), "mirrored: expected true or false, got 1"),
        (lambda: MutationSchedule(final_power=0.0), "final_power: 0.0 must be > 0"),
        (lambda: MutationSchedule(decay="cosine"), "decay: 'cosine' is not one of"),
        (lambda: GAParams(mutation_schedule={"kind": "linear"}), "was renamed to"),
    ],
)
def test_bad_hyperparameters_raise_clear_errors(factory, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        factory()


def test_unmirrored_es_accepts_odd_population() -> None:
    assert ESParams(population_size=5001, mirrored=False).population_size == 5001


@pytest.mark.parametrize("cls", [GA, ES, RandomSearch])
def test_noise_table_smaller_than_parameters(cls) -> None:
    with pytest.raises(ValueError, match="smaller than one parameter vector"):
        cls(2000, 1.0, NoiseTable(size=1000, cache_dir=False))


def test_bad_constructor_arguments(noise: NoiseTable) -> None:
    with pytest.raises(ValueError, match="scales must be one float or a vector"):
        GA(10, np.ones(3), noise)
    with pytest.raises(TypeError, match="needs params of type GAParams"):
        GA(10, 1.0, noise, params=ESParams())


def test_tell_rejects_wrong_shape_and_stale_request(noise: NoiseTable) -> None:
    ga = make_algorithm("ga", num_params=3, scales=1.0, noise=noise, **SMALL)
    request = ga.ask()
    with pytest.raises(ValueError, match=r"returns must have shape \(31, 1\)"):
        ga.tell(request, np.zeros(31))
    assert ga.tell(request, np.zeros((31, 1))) is None  # Validation phase follows.
    with pytest.raises(ValueError, match="pass the request returned by the last ask"):
        ga.tell(request, np.zeros((31, 1)))


def test_es_centered_sign_rank_update_by_hand() -> None:
    """Two mirrored pairs; the sign returns order the four perturbations unlike the returns.
    Sign ranks: 1 -> 1/6, 4 -> 1/2, 0 -> -1/6, -2 -> -1/2, so the pair weights are -1/3 and
    +1/3 and g = (-eps_0 + eps_1) / 3 / 4; the first Adam step moves theta by
    lr * g / (|g| + eps) per element."""
    table = NoiseTable(seed=5, size=10_000, cache_dir=False)
    params = ESParams(
        population_size=4, l2_coeff=0.0, learning_rate=0.01, fitness_shaping="centered_sign_rank"
    )
    es = ES(6, 1.0, table, seed=2, params=params)
    theta = es.center.astype(np.float64)
    request = es.ask()
    returns = np.array([[5.0], [1.0], [-3.0], [2.0]])
    sign_returns = np.array([[1.0], [4.0], [0.0], [-2.0]])
    with pytest.raises(ValueError, match="ranks sign returns: pass"):
        es.tell(request, returns)
    with pytest.raises(ValueError, match=r"sign_returns must have shape \(4, 1\)"):
        es.tell(request, returns, sign_returns[:3])
    es.tell(request, returns, sign_returns)
    eps = [table.get(g.noise_index, 6).astype(np.float64) for g in request.genomes[0::2]]
    g = (-eps[0] + eps[1]) / 3 / 4
    expected = theta + 0.01 * g / (np.abs(g) + 1e-8)
    np.testing.assert_allclose(es.center, expected, rtol=1e-5, atol=1e-7)


def test_sign_returns_of_a_nan_genome_rank_last(noise: NoiseTable) -> None:
    params = ESParams(population_size=4, fitness_shaping="centered_sign_rank")
    es = ES(3, 1.0, noise, params=params)
    request = es.ask()
    with pytest.warns(RuntimeWarning, match="NaN or inf"):
        es.tell(request, np.array([[1.0], [np.nan], [0.0], [2.0]]), np.full((4, 1), 9.0))
    # The NaN genome's sign return (9, the best) must not count: compare with an explicit -inf.
    twin = ES(3, 1.0, noise, params=params)
    twin.tell(twin.ask(), np.zeros((4, 1)), np.array([[9.0], [-np.inf], [9.0], [9.0]]))
    np.testing.assert_array_equal(es.center, twin.center)


@pytest.mark.parametrize(
    ("name", "one_phase"),
    [
        ("ars", {"center_episodes": 0}),
        ("es", {"center_episodes": 0}),
        ("ga", {"validation_candidates": 0}),
    ],
)
def test_training_returns_steer_the_search_while_summaries_report_the_returns(
    name: str, one_phase: dict, noise: NoiseTable
) -> None:
    """EvalResults.with_reward_decrease (env.decrease_training_rewards_by): selection and
    updates see returns - shift x length, the summary the env's own returns."""
    rng = np.random.default_rng(SEED)
    print("seed", SEED)
    shifted, plain = (
        make_algorithm(name, num_params=3, scales=1.0, noise=noise, seed=2, **SMALL, **one_phase)
        for _ in range(2)
    )
    request = shifted.ask()
    shape = request.episode_seeds.shape
    returns = rng.normal(size=shape) * 10
    lengths = rng.integers(1, 50, size=shape)
    results = EvalResults(
        returns=returns,
        sign_returns=np.sign(returns),
        lengths=lengths,
        frames=lengths,
        terminated=np.ones(shape, bool),
        truncated=np.zeros(shape, bool),
        stats=EvalStats(wall_s=0.0, frames=0, steps=0, episodes=0, workers=()),
    ).with_reward_decrease(1.5)
    np.testing.assert_array_equal(results.training_returns, returns - 1.5 * lengths)
    reported = shifted.tell(request, results)
    plain.tell(plain.ask(), returns - 1.5 * lengths)
    first, second = shifted.state_dict(), plain.state_dict()
    for key, value in first.items():
        np.testing.assert_array_equal(value, second[key], err_msg=key)
    assert reported.best == returns.mean(axis=1).max()
    assert reported.mean == pytest.approx(returns.mean())


# NaN/inf policy.


def test_nan_fitness_is_worst_counted_and_warned_once(noise: NoiseTable) -> None:
    ga = make_algorithm("ga", num_params=2, scales=1.0, noise=noise, seed=1, **SMALL)
    bad = set()

    def fitness(weights: np.ndarray, seed: int) -> float:
        if weights[0] > 0:  # Roughly half the genomes "crash".
            bad.add(weights.tobytes())
            return float("nan")
        return sphere(weights, seed)

    with pytest.warns(RuntimeWarning, match="NaN or inf fitness") as caught:
        summaries = optimize(fitness, ga, generations=3)
    assert len(caught) == 1
    assert summaries[0].nan_count > 0 and all(np.isfinite(s.best) for s in summaries)
    assert ga.decoder.decode(ga.elite).tobytes() not in bad


def test_all_nan_phase_raises_and_keeps_state(noise: NoiseTable) -> None:
    es = make_algorithm("es", num_params=2, scales=1.0, noise=noise, **SMALL)
    request = es.ask()
    with pytest.raises(ValueError, match="all 32 fitness values are NaN or inf"):
        es.tell(request, np.full((32, 1), np.nan))
    assert es.ask() is request and es.generation == 0
    assert es.tell(request, np.zeros((32, 1))) is None


# Determinism and seeding.


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_same_seed_same_run(name: str, noise: NoiseTable) -> None:
    def make(seed: int) -> Optimizer:
        return make_algorithm(name, num_params=3, scales=1.0, noise=noise, seed=seed, **SMALL)

    first, second, other = make(4), make(4), make(5)
    assert first.ask().genomes == second.ask().genomes
    decoded = [a.decoder.decode_batch(a.ask().genomes) for a in (first, second, other)]
    np.testing.assert_array_equal(decoded[0], decoded[1])
    assert not np.array_equal(decoded[0], decoded[2])
    summaries = [run(algorithm, generations=4) for algorithm in (first, second)]
    assert summaries[0] == summaries[1]
    assert first.ask().genomes == second.ask().genomes
    np.testing.assert_array_equal(first.ask().episode_seeds, second.ask().episode_seeds)


def test_episode_seeds_shared_where_comparisons_are_made(noise: NoiseTable) -> None:
    es = make_algorithm("es", num_params=3, scales=1.0, noise=noise, population_episodes=2, **SMALL)
    seeds = es.ask().episode_seeds
    assert seeds.dtype == np.int64 and seeds.shape == (32, 2) and not seeds.flags.writeable
    np.testing.assert_array_equal(seeds[0::2], seeds[1::2])  # Mirrored pairs.
    assert len(np.unique(seeds[0::2])) == 32
    ga = make_algorithm("ga", num_params=3, scales=1.0, noise=noise, **SMALL)
    run(ga, phases=1)
    validation = ga.ask()
    assert validation.phase is Phase.VALIDATION and validation.episode_seeds.shape == (10, 30)
    assert len(np.unique(validation.episode_seeds)) == 300  # Independent per candidate.


# GA and random search semantics.


def tell_rows(algorithm: Optimizer, rows: list[list[float]]):
    """Tells the pending request the given returns (one row per genome)."""
    return algorithm.tell(algorithm.ask(), np.array(rows, dtype=np.float64))


def test_ga_follows_algorithm_1_on_hand_computed_generations(noise: NoiseTable) -> None:
    params = GAParams(
        population_size=5, truncation=2, validation_candidates=3, validation_episodes=2
    )
    ga = GA(3, 1.0, noise, seed=2, params=params)
    g = ga.ask().genomes
    assert len(g) == 4 and all(not genome.mutations for genome in g)  # N - 1 new, no elite yet.
    assert tell_rows(ga, [[1], [4], [3], [2]]) is None
    validation = ga.ask()
    assert validation.genomes == (g[1], g[2], g[3])  # Generation 0: the top 3.
    summary = tell_rows(ga, [[5, 5], [1, 3], [9, 9]])
    assert (summary.best, summary.mean, summary.median) == (4, 2.5, 2.5)
    assert summary.elite_score == 9 and summary.extras["validation_mean"] == pytest.approx(16 / 3)
    assert ga.elite == g[3] and summary.episodes == 4 + 6

    # Generation 1: 4 children of the top T = 2, the elite g3 and the best other, g1.
    c = ga.ask().genomes
    assert g[3] not in c and len(c) == 4  # The elite is carried, not re-evaluated.
    picks = [[g[3], g[1]].index(child.parent) for child in c]
    drawn = np.random.default_rng([2, 1, 1]).integers(0, 2, size=4)  # Stream.SELECTION
    assert picks == drawn.tolist()
    assert all(child.mutations[-1][1] == 0.002 for child in c)
    tell_rows(ga, [[7], [0], [8], [6]])
    assert ga.ask().genomes == (g[3], c[2], c[0])  # The elite plus the top 2.
    summary = tell_rows(ga, [[3, 3], [10, 12], [11, 11]])  # c2 and c0 tie: c2 comes first.
    assert ga.elite == c[2] and summary.elite_score == 11

    # Generation 2: the parents are the new elite c2 and c0; the old elite g3 is dropped.
    d = ga.ask().genomes
    assert {child.parent for child in d} <= {c[2], c[0]}
    tell_rows(ga, [[1], [2], [3], [4]])
    assert ga.ask().genomes == (c[2], d[3], d[2])
    tell_rows(ga, [[5, 5], [5, 5], [4, 6]])  # A three-way tie keeps the elite.
    assert ga.elite == c[2]


def test_ga_uber_variant_evaluates_n_new_individuals(noise: NoiseTable) -> None:
    params = GAParams(
        population_size=4,
        truncation=4,
        validation_candidates=2,
        validation_episodes=1,
        elite_in_population=False,
    )
    ga = GA(3, 1.0, noise, seed=0, params=params)
    g = ga.ask().genomes
    assert len(g) == 4
    tell_rows(ga, [[1], [2], [3], [4]])
    tell_rows(ga, [[0], [1]])  # Candidates g3, g2: g2 wins.
    assert ga.elite == g[2]
    children = ga.ask().genomes
    assert len(children) == 4  # N new individuals, the elite beside them.
    assert {child.parent for child in children} <= {g[2], g[3], g[1], g[0]}  # T = 4 parents.


def test_validation_candidates_of_one_is_refused() -> None:
    with pytest.raises(ValueError, match="validation_candidates: 1 must be 0"):
        GAParams(population_size=5, truncation=2, validation_candidates=1)
    with pytest.raises(ValueError, match="between 2 and the 4 new individuals"):
        GAParams(population_size=5, truncation=2, validation_candidates=5)


def test_mutation_schedule_values() -> None:
    linear = MutationSchedule("linear", final_power=0.02, generations=4)
    assert [linear.power(0.1, g) for g in (0, 2, 4, 9)] == pytest.approx([0.1, 0.06, 0.02, 0.02])
    exponential = MutationSchedule("exponential", final_power=0.001, generations=2)
    assert [exponential.power(0.1, g) for g in (0, 1, 5)] == pytest.approx([0.1, 0.01, 0.001])
    assert MutationSchedule().power(0.1, 500) == 0.1  # constant by default


def test_ga_without_validation_takes_population_best(noise: NoiseTable) -> None:
    ga = make_algorithm(
        "ga", num_params=2, scales=1.0, noise=noise, validation_candidates=0, **SMALL
    )
    request = ga.ask()
    summary = run(ga, phases=1)[0]
    assert summary.elite_score == summary.best and summary.episodes == 31  # N - 1 new ones.
    assert ga.elite in request.genomes


def test_ga_improves_steadily_where_random_search_stalls(noise: NoiseTable) -> None:
    target = np.ones(50, dtype=np.float32)

    def fitness(weights: np.ndarray, seed: int) -> float:
        return -float(np.sum((weights - target) ** 2)) + np.random.default_rng(seed).normal(0, 0.1)

    common = {"population_size": 50, "validation_candidates": 3, "validation_episodes": 5}
    ga = GA(50, 1.0, noise, seed=0, params=GAParams(truncation=10, mutation_power=0.1, **common))
    rs = RandomSearch(50, 1.0, noise, seed=0, params=RandomSearchParams(**common))
    ga_scores = [s.elite_score for s in optimize(fitness, ga, 60)]
    rs_scores = [s.elite_score for s in optimize(fitness, rs, 60)]
    assert ga_scores[0] == rs_scores[0] < -60  # Same start: generation 0 is random in both.
    checkpoints = ga_scores[9::10]
    assert all(later > earlier + 1 for earlier, later in itertools.pairwise(checkpoints))
    assert ga_scores[-1] > -6
    assert rs_scores[-1] < -40 and rs_scores[-1] - rs_scores[29] < 5  # Stalled.


# ES.


def test_noise_sums_are_the_sequential_float64_sums_bit_for_bit(noise: NoiseTable) -> None:
    """In the order of the slices, whatever the CPU's vector width (no BLAS), across the
    column blocks: the same bits on every machine."""
    length = BLOCK + 37
    rng = np.random.default_rng(SEED)
    print("seed", SEED)
    indices = rng.integers(0, len(noise) - length, size=7)
    weights, squares = rng.normal(size=7), rng.normal(size=7)
    first, second = np.zeros(length), np.zeros(length)
    for i, w, v in zip(indices, weights, squares, strict=True):
        z = noise.get(int(i), length).astype(np.float64)
        first = first + w * z
        second = second + v * (z * z)
    got_first, got_second = noise_moments(noise, indices, weights, squares, length)
    np.testing.assert_array_equal(got_first, first)
    np.testing.assert_array_equal(got_second, second)
    np.testing.assert_array_equal(weighted_noise_sum(noise, indices, weights, length), first)


def test_es_climbs_a_linear_function(noise: NoiseTable) -> None:
    es = ES(4, 0.0, noise, params=ESParams(population_size=20, learning_rate=0.1, l2_coeff=0.0))
    direction = np.array([1.0, -2.0, 0.5, 0.0])
    optimize(lambda w, seed: float(w @ direction), es, generations=5)
    assert np.all(np.sign(es.center[:3]) == np.sign(direction[:3]))


def test_es_without_mirroring_or_center_phase(noise: NoiseTable) -> None:
    params = ESParams(population_size=9, mirrored=False, center_episodes=0)
    es = ES(3, 1.0, noise, seed=0, params=params)
    request, before = es.ask(), es.center.copy()
    assert len(request.genomes) == 9 and {genome.sign for genome in request.genomes} == {1}
    summary = run(es, phases=1)[0]  # One phase completes the generation.
    assert summary.elite_score is None and es.generation == 1 and es.elite.center_id == 1
    assert not np.array_equal(es.center, before)
    np.testing.assert_array_equal(es.decoder.decode(es.elite), es.center)


def test_es_drives_1000d_sphere_near_optimum(noise: NoiseTable) -> None:
    params = ESParams(population_size=100, sigma=0.02, learning_rate=0.01, l2_coeff=0.0)
    es = ES(1000, 1.0, noise, seed=0, params=params)
    summaries = optimize(lambda w, seed: -float(np.dot(w, w)), es, generations=600)
    assert summaries[0].elite_score < -900  # ||theta_0||^2 with theta_0 ~ N(0, I).
    assert summaries[-1].elite_score > -1.0  # Within 0.1% of the start's distance.


def test_es_escapes_local_minima_of_shifted_rastrigin(noise: NoiseTable) -> None:
    shift = np.random.default_rng(1).uniform(-2, 2, 1000).astype(np.float32)

    def rastrigin(weights: np.ndarray) -> np.ndarray:  # float32 [..., 1000] -> [...], max 0.
        z = weights - shift
        return -np.sum(z * z + 1 - np.cos(2 * np.pi * z), axis=-1, dtype=np.float64)

    params = ESParams(population_size=200, sigma=1.0, learning_rate=0.03, l2_coeff=0.0)
    es = ES(1000, 1.0, noise, seed=0, params=params)
    local = es.center.copy()  # Plain gradient ascent from the same start gets trapped.
    for _ in range(500):
        z = local - shift
        local -= 0.01 * (2 * z + 2 * np.pi * np.sin(2 * np.pi * z))
    scores = []
    while len(scores) < 400:  # Batched evaluation: the evaluator's view of ask/tell.
        request = es.ask()
        summary = es.tell(request, rastrigin(es.decoder.decode_batch(request.genomes))[:, None])
        if summary is not None:
            scores.append(summary.elite_score)
    assert scores[0] < -3000 and rastrigin(local) < -1500
    assert scores[-1] > -60 and scores[-1] > rastrigin(local) / 25


# Checkpoints.


def through_yaml_and_npz(state: dict) -> dict:
    """Saves a state_dict as YAML scalars + npz arrays and loads it back (no pickle)."""
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    scalars = {k: v for k, v in state.items() if k not in arrays}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as loaded:
        return yaml.safe_load(yaml.safe_dump(scalars)) | dict(loaded)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("stop_after", [1, 4, 5])  # Tells before the checkpoint: mid-phase too.
def test_state_dict_resume_is_exact(name: str, stop_after: int, noise: NoiseTable) -> None:
    def make() -> Optimizer:
        return make_algorithm(name, num_params=3, scales=1.0, noise=noise, seed=9, **SMALL)

    uninterrupted = make()
    expected = run(uninterrupted, generations=5)
    first = make()
    before = run(first, phases=stop_after)
    resumed = make()
    resumed.load_state_dict(through_yaml_and_npz(first.state_dict()))
    after = run(resumed, generations=5 - len(before))
    assert before + after == expected
    assert resumed.elite == uninterrupted.elite
    np.testing.assert_array_equal(
        resumed.decoder.decode(resumed.elite), uninterrupted.decoder.decode(uninterrupted.elite)
    )


def test_load_state_dict_rejects_other_run(noise: NoiseTable) -> None:
    state = make_algorithm(
        "es", num_params=3, scales=1.0, noise=noise, seed=1, **SMALL
    ).state_dict()
    other_seed = make_algorithm("es", num_params=3, scales=1.0, noise=noise, seed=2, **SMALL)
    with pytest.raises(ValueError, match="checkpoint has seed=1 but this optimizer has seed=2"):
        other_seed.load_state_dict(state)
    ga = make_algorithm("ga", num_params=3, scales=1.0, noise=noise, seed=1, **SMALL)
    with pytest.raises(ValueError, match="checkpoint has algorithm='es'"):
        ga.load_state_dict(state)
