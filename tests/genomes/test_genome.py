"""Tests for neuroevo.genomes.genome: materialisation, the parent cache, and serialisation."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import yaml

from neuroevo.genomes.genome import (
    ESGenome,
    GAGenome,
    GenomeDecoder,
    genome_from_dict,
    genome_to_dict,
    pack_genomes,
    unpack_genomes,
)
from neuroevo.genomes.noise import NoiseTable

P = 5000


@pytest.fixture(scope="module")
def noise() -> NoiseTable:
    return NoiseTable(seed=0, size=1_000_000, cache_dir=False)


@pytest.fixture(scope="module")
def scales() -> np.ndarray:
    scales = np.full(P, 0.05, dtype=np.float32)
    scales[-100:] = 0.0  # Biases start at zero.
    return scales


def random_lineage(noise: NoiseTable, generations: int, width: int, seed: int) -> list[GAGenome]:
    """Returns genomes of a GA-like family tree, in the order a GA creates them."""
    rng = np.random.default_rng(seed)
    population = [GAGenome(noise.sample_index(rng, P)) for _ in range(width)]
    lineage = list(population)
    for _ in range(generations):
        parents = population[: max(1, width // 3)]
        population = [
            parents[rng.integers(len(parents))].child(noise.sample_index(rng, P), 0.01)
            for _ in range(width)
        ]
        lineage += population
    return lineage


def test_initial_genome_is_scaled_noise(noise: NoiseTable, scales: np.ndarray) -> None:
    weights = GenomeDecoder(noise, scales).decode(GAGenome(1234))
    assert weights.dtype == np.float32 and weights.shape == (P,) and weights.flags.writeable
    np.testing.assert_array_equal(weights, scales * noise.get(1234, P))
    assert np.all(weights[-100:] == 0)


def test_mutations_add_sigma_times_noise(noise: NoiseTable, scales: np.ndarray) -> None:
    genome = GAGenome(10).child(500, 0.1).child(900, 0.02)
    expected = scales * noise.get(10, P)
    expected += np.float32(0.1) * noise.get(500, P)
    expected += np.float32(0.02) * noise.get(900, P)
    np.testing.assert_array_equal(GenomeDecoder(noise, scales).decode(genome), expected)
    assert genome.parent == GAGenome(10, ((500, 0.1),)) and GAGenome(10).parent is None


def test_cache_and_replay_agree_bit_for_bit(noise: NoiseTable, scales: np.ndarray) -> None:
    lineage = random_lineage(noise, generations=12, width=9, seed=1)
    cached = GenomeDecoder(noise, scales)
    replayed = GenomeDecoder(noise, scales, cache_size=0)
    through_cache = cached.decode_batch(lineage)
    assert cached.cached_parents > 0 and replayed.cached_parents == 0
    # Replay in a scrambled order, so no result depends on what was decoded before.
    order = np.random.default_rng(2).permutation(len(lineage))
    for i in order:
        np.testing.assert_array_equal(replayed.decode(lineage[i]), through_cache[i])


def test_bounded_cache_stays_exact(noise: NoiseTable, scales: np.ndarray) -> None:
    lineage = random_lineage(noise, generations=8, width=6, seed=3)
    small = GenomeDecoder(noise, scales, cache_size=3 * 4 * P)
    reference = GenomeDecoder(noise, scales, cache_size=0).decode_batch(lineage)
    for genome, expected in zip(lineage, reference, strict=True):
        np.testing.assert_array_equal(small.decode(genome), expected)
        assert small.cached_parents <= 3


def test_fifty_generation_chain_within_float32_rounding(
    noise: NoiseTable, scales: np.ndarray
) -> None:
    rng = np.random.default_rng(4)
    genome = GAGenome(noise.sample_index(rng, P))
    for _ in range(50):
        genome = genome.child(noise.sample_index(rng, P), 0.002)
    exact = scales.astype(np.float64) * noise.get(genome.init_index, P)
    magnitude = np.abs(exact)
    for index, sigma in genome.mutations:
        term = float(np.float32(sigma)) * noise.get(index, P).astype(np.float64)
        exact += term
        magnitude += np.abs(term)
    weights = GenomeDecoder(noise, scales).decode(genome)
    # Each of the 50 float32 additions (and products) rounds by at most half an ulp.
    bound = 51 * np.finfo(np.float32).eps * magnitude
    assert np.all(np.abs(weights - exact) <= bound)


def test_es_genomes_perturb_registered_center(noise: NoiseTable, scales: np.ndarray) -> None:
    decoder = GenomeDecoder(noise, scales)
    center = np.linspace(-1, 1, P, dtype=np.float32)
    decoder.set_center(7, center)
    plus, minus, itself = (ESGenome(7, 300, sign, 0.02) for sign in (1, -1, 0))
    eps = noise.get(300, P)
    np.testing.assert_array_equal(decoder.decode(plus), center + np.float32(0.02) * eps)
    np.testing.assert_array_equal(decoder.decode(minus), center + np.float32(-0.02) * eps)
    np.testing.assert_array_equal(decoder.decode(itself), center)
    decoder.set_center(8, center)
    decoder.set_center(9, center)  # keep=2: centre 7 is dropped.
    with pytest.raises(ValueError, match="centre 7 is not registered"):
        decoder.decode(plus)


def test_decoding_from_threads_matches_serial(noise: NoiseTable, scales: np.ndarray) -> None:
    lineage = random_lineage(noise, generations=6, width=8, seed=5)
    serial = GenomeDecoder(noise, scales, cache_size=0).decode_batch(lineage)
    shared = GenomeDecoder(noise, scales)
    with ThreadPoolExecutor(4) as pool:
        parallel = np.stack(list(pool.map(shared.decode, lineage)))
    np.testing.assert_array_equal(parallel, serial)


@pytest.mark.parametrize(
    ("scales", "size", "match"),
    [
        (np.ones((2, 3)), 100, "1-D vector"),
        (-np.ones(5), 100, "finite and >= 0"),
        (np.ones(200), 100, "smaller than one parameter vector"),
    ],
)
def test_bad_decoder_arguments(scales: np.ndarray, size: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GenomeDecoder(NoiseTable(size=size, cache_dir=False), scales)


def test_decode_rejects_non_genomes(noise: NoiseTable, scales: np.ndarray) -> None:
    with pytest.raises(TypeError, match="expected a GAGenome or ESGenome"):
        GenomeDecoder(noise, scales).decode((1, ()))  # type: ignore[arg-type]


GENOMES = [
    GAGenome(3),
    GAGenome(5, ((7, 0.002), (11, 0.1))),
    ESGenome(2, 99, -1, 0.02),
    ESGenome(0, 0, 0, 0.0),
]


@pytest.mark.parametrize("genome", GENOMES)
def test_genome_dict_round_trip_through_yaml(genome) -> None:
    text = yaml.safe_dump(genome_to_dict(genome))
    assert genome_from_dict(yaml.safe_load(text)) == genome


@pytest.mark.parametrize("genomes", [tuple(GENOMES[:2]) * 3, tuple(GENOMES[2:]), ()])
def test_pack_round_trip_through_npz(genomes) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **pack_genomes(genomes))
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as arrays:
        assert unpack_genomes(dict(arrays)) == genomes


def test_pack_rejects_mixed_kinds() -> None:
    with pytest.raises(TypeError, match="one kind"):
        pack_genomes(GENOMES)
