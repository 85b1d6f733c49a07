"""In-graph genome materialisation (``NeuroevoMaterialize``, and the TensorFlow-op version for
devices without the op) against ``GenomeDecoder``: bit-identical float32 rows for GA, ES,
scale-vector ES and random-search genomes, and clear errors."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from neuroevo.evaluation.materialize import Materializer, plan_genomes
from neuroevo.genomes.genome import ESGenome, GAGenome, GenomeDecoder
from neuroevo.genomes.noise import NoiseTable
from neuroevo.ops import load

SIZE = 120_000
P = 20_003  # over one kernel block (16384), not a multiple of it


def _genomes(rng: np.random.Generator) -> list:
    def index() -> int:
        return int(rng.integers(0, SIZE - P))

    genomes = []
    for _ in range(5):  # GA chains of 0-3 mutations; no mutation is random search's genome
        g = GAGenome(index())
        for _ in range(int(rng.integers(0, 4))):
            g = g.child(index(), float(rng.uniform(1e-3, 0.1)))
        genomes.append(g)
        genomes.append(g.child(index(), float(rng.uniform(1e-3, 0.1))))  # a shared parent
    genomes += [ESGenome(7, index(), sign, float(rng.uniform(0.01, 0.1))) for sign in (1, -1, 0)]
    # PGPE / SNES / CEM / sep-CMA-ES: a per-parameter scale vector, two vectors sharing a centre
    genomes += [
        ESGenome(7, index(), sign, float(rng.uniform(0.5, 2.0)), scale_id=scale)
        for sign in (1, -1, 0)
        for scale in (8, 9)
    ]
    return genomes


@pytest.mark.parametrize("implementation", ["op", "gather"])
@pytest.mark.parametrize("cached", [False, True])
def test_rows_equal_the_host_decoder(tmp_path, cached, implementation, rng):
    seed = int(rng.integers(1 << 31))  # the rng fixture prints its own seed for a replay
    noise = NoiseTable(seed % 100, size=SIZE, cache_dir=tmp_path if cached else False)
    scales = rng.uniform(0, 0.3, P).astype(np.float32)
    scales[::7] = 0  # biases
    decoder = GenomeDecoder(noise, scales)
    reference = GenomeDecoder(noise, scales, cache_size=0)  # replays whole chains
    center = rng.normal(size=P).astype(np.float32)
    std = rng.uniform(0.01, 0.2, P).astype(np.float32)
    wide_std = rng.lognormal(-3, 2, P).astype(np.float32)
    for vectors in (decoder, reference):
        vectors.set_center(7, center)
        vectors.set_center(8, std)
        vectors.set_center(9, wide_std, keep=3)
    genomes = _genomes(rng)
    expected = reference.decode_batch(genomes)
    plan = plan_genomes(genomes, decoder, decoder.decode_batch, P)
    assert len(plan.bases) < len(genomes)  # parents and the centre, not every genome
    assert len(plan.scales) == 3  # the init scales, then each scale vector once
    assert {-1, 1, 2} <= set(plan.term_scale.tolist())  # no ES genome was host-decoded
    materializer = Materializer(noise, P, "/CPU:0", implementation)
    order = rng.permutation(len(genomes)).astype(np.int32)
    got = materializer.materialize(materializer.plan_tensors(plan), tf.constant(order)).numpy()
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), expected[order].view(np.uint32))


@pytest.mark.parametrize("implementation", ["op", "gather"])
@pytest.mark.parametrize("table", [True, False])
def test_host_decoded_fallback_and_budget(implementation, table):
    rng = np.random.default_rng(4)
    noise = NoiseTable(1, size=SIZE, cache_dir=False) if table else None
    weights = rng.normal(size=(3, 50)).astype(np.float32)
    weights[1, :5] = -0.0
    plan = plan_genomes([2, 0, 1], None, lambda gs: weights[list(gs)], 50)
    materializer = Materializer(noise, 50, "/CPU:0", implementation)
    order = tf.constant([1, 0, 2], tf.int32)
    got = materializer.materialize(materializer.plan_tensors(plan), order).numpy()
    assert np.array_equal(got.view(np.uint32), weights[[0, 2, 1]].view(np.uint32))
    assert plan_genomes([0, 1, 2], None, lambda gs: weights[list(gs)], 50, budget_bytes=400) is None


def test_the_gather_implementation_refuses_plans_of_several_terms_per_genome():
    noise = NoiseTable(1, size=1000, cache_dir=False)
    decoder = GenomeDecoder(noise, np.ones(100, np.float32))
    plan = plan_genomes([GAGenome(5)], decoder, decoder.decode_batch, 100)
    two_terms = dataclasses.replace(
        plan,
        term_offsets=np.array([0, 2], np.int64),
        term_coef=np.ones(2, np.float32),
        term_scale=np.zeros(2, np.int32),
        term_noise=np.array([5, 9], np.int64),
    )
    Materializer(noise, 100, "/CPU:0").plan_tensors(two_terms)  # the op takes them
    with pytest.raises(ValueError, match="at most one term"):
        Materializer(noise, 100, "/CPU:0", "gather").plan_tensors(two_terms)
    with pytest.raises(ValueError, match="implementation"):
        Materializer(noise, 100, "/CPU:0", "xla")


def test_bad_plans_are_invalid_argument():
    noise = NoiseTable(1, size=1000, cache_dir=False)
    decoder = GenomeDecoder(noise, np.ones(100, np.float32))
    plan = plan_genomes([GAGenome(950)], decoder, decoder.decode_batch, 100)
    materializer = Materializer(noise, 100, "/CPU:0")
    tensors = materializer.plan_tensors(plan)
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside the noise table"):
        materializer.materialize(tensors, tf.constant([0], tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="genomes"):
        materializer.materialize(tensors, tf.constant([1], tf.int32))


def test_claims_never_overlap_and_stop_at_the_limit():
    ops = load("rollout")
    counter = ops.neuroevo_claim_counter_make()
    ops.neuroevo_claim_counter_reset(counter, 10)
    got = [tuple(int(x) for x in ops.neuroevo_claim(counter, n)) for n in (4, 0, 5, 3, 2)]
    assert got == [(0, 4), (4, 4), (4, 9), (9, 10), (10, 10)]
    with pytest.raises(tf.errors.InvalidArgumentError, match="count"):
        ops.neuroevo_claim(counter, -1)
