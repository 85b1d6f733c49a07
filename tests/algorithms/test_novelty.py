"""Tests for novelty search: kNN novelty against brute force, the archive's exact save/restore,
NSRA-ES's weight schedule against hand-computed sequences, NS-ES / NSR-ES / GA-NS generations
recomputed by hand from the papers' definitions, and trajectory behaviours recorded by the
evaluator against reference episodes."""

from __future__ import annotations

import numpy as np
import pytest
from test_algorithms import through_yaml_and_npz
from toy_env import ChainEnv, LinearModel, decode, reference_episode

from neuroevo.algorithms import (
    GANS,
    NSES,
    NSRAES,
    NSRES,
    GANSParams,
    NoveltyArchive,
    NSESParams,
    NSRAESParams,
    Phase,
    knn_novelty,
    make_algorithm,
)
from neuroevo.algorithms.noise_sums import weighted_noise_sum
from neuroevo.algorithms.nses import nsra_weight_step
from neuroevo.algorithms.optimizers import center_step
from neuroevo.algorithms.shaping import centered_ranks
from neuroevo.evaluation import EvalRequest, EvalResults, EvalStats, Evaluator
from neuroevo.evaluation.behavior import BehaviorParams
from neuroevo.genomes.noise import NoiseTable


@pytest.fixture(scope="module")
def noise() -> NoiseTable:
    return NoiseTable(seed=1, size=200_000, cache_dir=False)


def brute_force_novelty(queries, reference, k, exclude_self=False) -> np.ndarray:
    """Uber's definition, one query at a time: mean of the k smallest Euclidean distances."""
    out = []
    for i, q in enumerate(queries.astype(np.float64)):
        d = np.sqrt(((reference.astype(np.float64) - q) ** 2).sum(axis=1))
        if exclude_self:
            d = np.delete(d, i)
        out.append(np.sort(d)[:k].mean() if d.size else 0.0)
    return np.array(out)


@pytest.mark.parametrize("k", [1, 10, 50])
def test_novelty_matches_brute_force_on_random_archives(k: int, rng) -> None:
    for dims, size in [(2, 300), (7, 40), (30, 5)]:
        archive = rng.normal(size=(size, dims)) * rng.uniform(0.1, 10)
        queries = rng.normal(size=(25, dims))
        np.testing.assert_allclose(
            knn_novelty(queries, archive, k), brute_force_novelty(queries, archive, k), rtol=1e-9
        )


def test_ram_novelty_is_exact_and_chunked(monkeypatch, rng) -> None:
    archive = rng.integers(0, 256, (500, 128), dtype=np.uint8)
    queries = rng.integers(0, 256, (37, 128), dtype=np.uint8)
    queries[0] = archive[3]  # a zero distance must stay exactly zero
    monkeypatch.setattr("neuroevo.algorithms.novelty.CHUNK_BYTES", 4 * 500 * 5)  # 5-row chunks
    got = knn_novelty(queries, archive, 10)
    want = brute_force_novelty(queries, archive, 10)
    np.testing.assert_allclose(got, want, rtol=1e-12)  # squared distances are exact integers


def test_novelty_with_population_excludes_self(rng) -> None:
    population, archive_rows = rng.normal(size=(12, 3)), rng.normal(size=(4, 3))
    archive = NoveltyArchive(k=5)
    archive.add(archive_rows, generation=0)
    want = brute_force_novelty(population, np.concatenate([population, archive_rows]), 5, True)
    np.testing.assert_allclose(archive.novelty(population, with_population=True), want)
    np.testing.assert_allclose(
        archive.novelty(population), brute_force_novelty(population, archive_rows, 5)
    )


def test_novelty_edge_cases() -> None:
    assert knn_novelty(np.ones((3, 2)), np.zeros((0, 2))).tolist() == [0.0, 0.0, 0.0]
    np.testing.assert_allclose(knn_novelty(np.zeros((1, 2)), np.array([[3.0, 4.0]]), 10), [5.0])
    with pytest.raises(ValueError, match="same d"):
        knn_novelty(np.ones((3, 2)), np.ones((3, 4)))
    with pytest.raises(ValueError, match="k must be >= 1"):
        knn_novelty(np.ones((3, 2)), np.ones((3, 2)), k=0)
    archive = NoveltyArchive()
    archive.add(np.zeros((2, 3), np.float32), 0)
    with pytest.raises(ValueError, match="one run must keep one BC"):
        archive.add(np.zeros((2, 4), np.float32), 1)


def test_archive_save_restore_is_exact(rng) -> None:
    archive = NoveltyArchive(k=3)
    for generation in range(40):  # grows past its initial buffer several times
        archive.add(rng.integers(0, 256, (rng.integers(0, 4), 128), dtype=np.uint8), generation)
    restored = NoveltyArchive(k=3)
    restored.load_state_dict(through_yaml_and_npz(archive.state_dict()))
    assert restored.behaviors.dtype == np.uint8
    np.testing.assert_array_equal(restored.behaviors, archive.behaviors)
    np.testing.assert_array_equal(restored.generations, archive.generations)
    queries = rng.integers(0, 256, (5, 128), dtype=np.uint8)
    np.testing.assert_array_equal(restored.novelty(queries), archive.novelty(queries))
    empty = NoveltyArchive()
    empty.load_state_dict(through_yaml_and_npz(NoveltyArchive().state_dict()))
    assert len(empty) == 0


def test_nsra_weight_schedule_matches_hand_computed_sequence() -> None:
    params = NSRAESParams(weight_delta=0.25, stagnation_generations=3, initial_weight=0.5)
    scores = [1.0, 2.0, 2.0, 1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0, 3.0]
    # improve: +0.25 (capped at 1); 3 stagnant generations in a row: -0.25 (floored at 0).
    expected = [0.75, 1.0, 1.0, 1.0, 0.75, 0.75, 0.75, 0.5, 0.5, 0.5, 0.25, 0.5, 0.5]
    weight, stagnation, best, got = params.initial_weight, 0, float("-inf"), []
    for score in scores:
        weight, stagnation, best = nsra_weight_step(weight, stagnation, best, score, params)
        got.append(weight)
    assert got == expected
    params = NSRAESParams(weight_delta=0.4, stagnation_generations=1, initial_weight=0.3)
    weight, stagnation, best, got = 0.3, 0, 5.0, []
    for _ in range(3):
        weight, stagnation, best = nsra_weight_step(weight, stagnation, best, 1.0, params)
        got.append(round(weight, 12))
    assert got == [0.0, 0.0, 0.0]


def xy(weights: np.ndarray, seed: int):
    """A deceptive toy: reward is -x, behaviour is (x, y)."""
    return -float(weights[0]), np.array(weights[:2])


def tell_xy(algorithm, request):
    """Returns -x, sign returns +x (ranked the other way round), behaviour (x, y)."""
    weights = algorithm.decoder.decode_batch(request.genomes)
    e = request.episodes_per_genome
    returns = np.repeat(-weights[:, :1].astype(np.float64), e, axis=1)
    behaviors = np.repeat(weights[:, None, :2], e, axis=1)
    summary = algorithm.tell(request, returns, sign_returns=-returns, behaviors=behaviors)
    return summary, weights


@pytest.mark.parametrize("shaping", ["centered_rank", "centered_sign_rank"])
@pytest.mark.parametrize("cls", [NSES, NSRES, NSRAES])
def test_novelty_es_generation_matches_the_paper_by_hand(cls, shaping, noise: NoiseTable) -> None:
    """Uber's nses.py: ``centered_sign_rank`` ranks the novelty, and the reward term ranks the
    returns, never the sign returns."""
    params_class = NSRAESParams if cls is NSRAES else NSESParams
    hyper = {"sigma": 0.1, "learning_rate": 0.05, "meta_population": 3, "k": 2}
    params = params_class(population_size=10, fitness_shaping=shaping, **hyper)
    algorithm = cls(4, 1.0, noise, seed=3, params=params)
    archive_request = algorithm.ask()
    assert archive_request.phase is Phase.ARCHIVE and len(archive_request.genomes) == 3
    _, initial = tell_xy(algorithm, archive_request)
    np.testing.assert_array_equal(algorithm.archive.behaviors, initial[:, :2])
    request = algorithm.ask()
    current = request.genomes[0].center_id
    center = initial[current].copy()
    _, perturbed = tell_xy(algorithm, request)
    novelty = brute_force_novelty(perturbed[:, :2], initial[:, :2], 2)
    reward = -perturbed[:, 0].astype(np.float64)
    weight = {NSES: 0.0, NSRES: 0.5, NSRAES: 1.0}[cls]  # NSRA starts at initial_weight 1
    shaped = (1 - weight) * centered_ranks(novelty) + weight * centered_ranks(reward)
    indices = np.array([g.noise_index for g in request.genomes[0::2]])
    gradient = weighted_noise_sum(noise, indices, shaped[0::2] - shaped[1::2], 4) / 10
    gradient -= np.float32(params.l2_coeff) * center
    step, _, _ = center_step(params, gradient, np.zeros(4, np.float32), np.zeros(4, np.float32), 1)
    center_request = algorithm.ask()
    assert center_request.phase is Phase.CENTER
    updated = algorithm.decoder.decode_batch(center_request.genomes)
    np.testing.assert_allclose(updated[current], center + step, rtol=1e-6)
    others = [m for m in range(3) if m != current]
    np.testing.assert_array_equal(updated[others], initial[others])
    summary, _ = tell_xy(algorithm, center_request)
    assert summary.generation == 0 and summary.episodes == 3 + 10 + 3
    np.testing.assert_allclose(algorithm.archive.behaviors[3], updated[current, :2])
    assert summary.elite_score == pytest.approx(-updated[:, 0].min())


def test_novelty_es_draws_centres_in_proportion_to_novelty(noise: NoiseTable) -> None:
    behaviors = np.array([[0.0], [1.0], [3.0]])

    def draws(k: int, generations: int) -> np.ndarray:
        algorithm = NSES(3, 1.0, noise, params=NSESParams(population_size=2, k=k))
        archive = NoveltyArchive(k)
        archive.add(behaviors, 0)  # the archive phase: every centre's BC is archived
        drawn = [algorithm._draw_center(archive, behaviors, g) for g in range(generations)]
        return np.bincount(drawn, minlength=3) / generations

    # k = 1: each centre's nearest archived BC is its own, novelty 0 for all: uniform.
    assert draws(1, 3000).min() > 0.3
    # k = 2: novelties (0 + 1) / 2, (0 + 1) / 2, (0 + 2) / 2, so P = 1/4, 1/4, 1/2.
    np.testing.assert_allclose(draws(2, 4000), [0.25, 0.25, 0.5], atol=0.03)


def test_ga_ns_selects_by_novelty_and_samples_the_archive(noise: NoiseTable) -> None:
    params = GANSParams(population_size=41, truncation=5, archive_probability=0.25, k=3)
    algorithm = GANS(3, 1.0, noise, seed=2, params=params)
    request = algorithm.ask()
    summary, weights = tell_xy(algorithm, request)
    novelty = brute_force_novelty(weights[:, :2], weights[:, :2], 3, exclude_self=True)
    parents = {g.parent for g in algorithm.ask().genomes}
    top = {request.genomes[i] for i in np.argsort(-novelty, kind="stable")[:5]}
    assert parents <= top and len(parents) >= 4  # the T most novel (the elite among them)
    assert 0 < len(algorithm.archive) < 40  # about a quarter of the 40 new individuals
    assert summary.elite_score == pytest.approx(float((-weights[:, 0]).max()))
    assert algorithm.elite == request.genomes[int(np.argmax(-weights[:, 0]))]
    with pytest.raises(ValueError, match="validation_candidates: 10 must be 0 for ga_ns"):
        GANSParams(validation_candidates=10)


@pytest.mark.parametrize("name", ["ns_es", "nsr_es", "nsra_es", "ga_ns"])
def test_novelty_needs_behaviours(name: str, noise: NoiseTable) -> None:
    algorithm = make_algorithm(name, num_params=3, scales=1.0, noise=noise, population_size=32)
    request = algorithm.ask()
    returns = np.zeros(request.episode_seeds.shape)
    with pytest.raises(ValueError, match="needs the behaviour of every episode"):
        algorithm.tell(request, returns)
    with pytest.raises(ValueError, match="behaviors must have shape"):
        algorithm.tell(request, returns, behaviors=np.zeros((1, 1, 2)))
    with pytest.raises(ValueError, match="NaN or inf"):
        algorithm.tell(request, returns, behaviors=np.full((*returns.shape, 2), np.nan))
    assert algorithm.ask() is request


def test_tell_takes_the_evaluators_results_as_is(noise: NoiseTable) -> None:
    """``tell(request, results)`` uses the results' returns, sign returns and behaviours: the
    same next generation as passing the three arrays."""
    rng = np.random.default_rng(11)
    print("seed 11")
    pair = [
        make_algorithm(
            "nsr_es",
            num_params=3,
            scales=1.0,
            noise=noise,
            population_size=8,
            fitness_shaping="centered_sign_rank",
            meta_population=2,
        )
        for _ in range(2)
    ]
    for _ in range(4):  # the archive phase, then a few generations
        request = pair[0].ask()
        shape = request.episode_seeds.shape
        returns, signs = rng.normal(size=shape), rng.normal(size=shape)
        behavior = rng.normal(size=(*shape, 2))
        results = EvalResults(
            returns=returns,
            sign_returns=signs,
            lengths=np.ones(shape, np.int64),
            frames=np.ones(shape, np.int64),
            terminated=np.ones(shape, bool),
            truncated=np.zeros(shape, bool),
            flags=np.zeros(shape, np.int32),
            behavior=behavior,
            stats=EvalStats(wall_s=0.0, frames=0, steps=0, episodes=0, workers=()),
        )
        pair[0].tell(request, results)
        pair[1].tell(pair[1].ask(), returns, sign_returns=signs, behaviors=behavior)
    first, second = pair[0].state_dict(), pair[1].state_dict()
    assert first.keys() == second.keys()
    for key, value in first.items():
        np.testing.assert_array_equal(value, second[key], err_msg=key)
    with pytest.raises(TypeError, match="only with a returns array"):
        pair[0].tell(pair[0].ask(), results, sign_returns=signs)


@pytest.mark.filterwarnings("ignore:.*inter-op threads")
@pytest.mark.parametrize(("every", "samples", "workers"), [(2, 3, 1), (3, 8, 3)])
def test_trajectory_behaviour_matches_reference_episodes(every, samples, workers) -> None:
    env, model = ChainEnv(6), LinearModel(6)
    genomes = list(range(40, 49))
    seeds = (np.arange(len(genomes) * 2, dtype=np.int64) * 5 + 3).reshape(-1, 2)
    options = BehaviorParams(kind="trajectory", every=every, samples=samples)
    with Evaluator(env, model, decode, workers=workers, behavior=options) as evaluator:
        results = evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=14)
    assert results.behavior.shape == (len(genomes), 2, samples, 2)
    for g, genome in enumerate(genomes):
        for e, seed in enumerate(seeds[g].tolist()):
            episode = reference_episode(genome, seed, 14)
            # The state after t steps is the observation the policy saw next (pos, t), or the
            # final behaviour once the episode is over.
            states = [(obs[0], t) for t, obs in enumerate(episode["observations"])]
            states.append(episode["behavior"])
            want = [states[min((s + 1) * every, episode["length"])] for s in range(samples)]
            np.testing.assert_array_equal(results.behavior[g, e], want, err_msg=f"{g}, {e}")
