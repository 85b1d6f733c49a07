"""LM-MA-ES against Algorithm 1 of Loshchilov, Glasmachers & Beyer (2017, arXiv:1705.06693),
written out here from the paper, independently of neuroevo/algorithms/lm_ma_es.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from neuroevo.algorithms import make_algorithm
from neuroevo.genomes.noise import NoiseTable


@pytest.fixture(scope="module")
def noise() -> NoiseTable:
    return NoiseTable(seed=5, size=1_000_000, cache_dir=False)


def paper_constants(n: int, lam: int, m: int) -> dict[str, float | np.ndarray]:
    """Algorithm 1's constants: w_i ~ ln(mu + 1/2) - ln i, c_sigma = 2 lambda / n, d_sigma = 2,
    c_c,i = lambda / (4^(i-1) n), c_d,i = 1 / (1.5^(i-1) n)."""
    mu = lam // 2
    w = np.array([math.log(mu + 0.5) - math.log(i) for i in range(1, mu + 1)])
    w /= w.sum()
    return {
        "w": w,
        "mu_w": 1 / float(np.sum(w**2)),
        "c_sigma": 2 * lam / n,
        "c_c": np.array([lam / (4 ** (i - 1) * n) for i in range(1, m + 1)]),
        "c_d": np.array([1 / (1.5 ** (i - 1) * n) for i in range(1, m + 1)]),
    }


def paper_update(k, y, sigma, p, vectors, z, d, fitness):
    """Lines 11-14 of Algorithm 1 (maximising ``fitness``): new (y, sigma, p_sigma, M)."""
    best = np.argsort(-fitness)[: len(k["w"])]
    z_w, d_w = k["w"] @ z[best], k["w"] @ d[best]
    y = y + sigma * d_w
    cs = k["c_sigma"]
    p = (1 - cs) * p + math.sqrt(k["mu_w"] * cs * (2 - cs)) * z_w
    vectors = np.array(
        [
            (1 - cc) * vec + math.sqrt(k["mu_w"] * cc * (2 - cc)) * z_w
            for cc, vec in zip(k["c_c"], vectors, strict=True)
        ]
    )
    sigma = sigma * math.exp(cs / 2 * (p @ p / len(p) - 1))
    return y, sigma, p, vectors


def test_two_steps_follow_algorithm_1(noise: NoiseTable) -> None:
    """Generation 0 samples y + sigma z (no vector learnt yet); generation 1 shapes each z by
    the first learnt vector, d = (1 - c_d,1) z + c_d,1 M_1 (M_1^T z). Samples are read back
    from the decoded weights, the normal rows z from the noise table."""
    n, lam, m, sigma = 40, 8, 3, 0.3
    lm = make_algorithm(
        "lm_ma_es",
        num_params=n,
        scales=1.0,
        noise=noise,
        seed=3,
        population_size=lam,
        sigma=sigma,
        memory=m,
        center_episodes=0,
    )
    k = paper_constants(n, lam, m)
    y, p, vectors = np.array(lm.center, np.float64), np.zeros(n), np.zeros((m, n))
    rng = np.random.default_rng(11)
    for generation in range(2):
        request = lm.ask()
        x = lm.decoder.decode_batch(request.genomes).astype(np.float64)
        indices, signs = lm._samples(generation)
        z = np.stack([noise.get(int(i), n) for i in indices]).astype(np.float64) * signs[:, None]
        d = z.copy()
        for j in range(min(generation, m)):
            d = (1 - k["c_d"][j]) * d + k["c_d"][j] * np.outer(d @ vectors[j], vectors[j])
        np.testing.assert_allclose(x, y + sigma * d, atol=2e-6)
        fitness = rng.normal(size=lam)
        lm.tell(request, fitness[:, None])
        y, sigma, p, vectors = paper_update(k, y, sigma, p, vectors, z, (x - y) / sigma, fitness)
        np.testing.assert_allclose(lm.center, y, atol=1e-5)
        assert abs(lm._state.sigma - sigma) < 1e-9 * sigma
        np.testing.assert_allclose(lm._state.p_sigma, p, atol=1e-5)
        np.testing.assert_allclose(lm._state.directions, vectors, atol=1e-5)


def test_small_problems_take_the_rates_of_dimension_two_lambda(noise: NoiseTable) -> None:
    """m = 4 + floor(3 ln n) by default. Below n = 2 lambda the paper's rates would leave
    (0, 1] and diverge; they are those of n = 2 lambda there, and a 2-D sphere converges."""
    lm = make_algorithm(
        "lm_ma_es", num_params=2, scales=1.0, noise=noise, population_size=32, center_episodes=0
    )
    assert lm._state.directions.shape == (4 + int(3 * math.log(2)), 2)
    k = paper_constants(64, 32, len(lm._state.directions))
    assert lm._constants["c_sigma"] == k["c_sigma"] == 1.0
    np.testing.assert_allclose(lm._constants["c_c"], k["c_c"])
    np.testing.assert_allclose(lm._constants["c_d"], k["c_d"])
    for _ in range(40):
        request = lm.ask()
        x = lm.decoder.decode_batch(request.genomes).astype(np.float64)
        lm.tell(request, -np.sum((x - 0.5) ** 2, axis=1, keepdims=True))
    assert np.sum((np.asarray(lm.center) - 0.5) ** 2) < 1e-8
    with pytest.raises(ValueError, match="memory"):
        make_algorithm("lm_ma_es", num_params=10, scales=1.0, noise=noise, memory=0)


ROTATION = np.linalg.qr(np.random.default_rng(0).normal(size=(100, 100)))[0]
AXES = 10 ** (3 * np.arange(100) / 99)


def rotated_ellipsoid(x: np.ndarray) -> np.ndarray:
    """float64 [n]: a 100-D non-separable quadratic of condition 1e6 with optimum at 1, for
    each row of ``x`` [n, 100]; a diagonal model cannot fit it, LM-MA-ES's directions can."""
    return np.sum((((x - 1) @ ROTATION.T) * AXES) ** 2, axis=1)


def test_lm_ma_es_beats_sep_cma_es_on_a_rotated_ellipsoid(noise: NoiseTable) -> None:
    """After the same 25,500 evaluations (lambda = 4 + floor(3 ln 100) = 17), LM-MA-ES, which
    learns correlations, ends several times below sep-CMA-ES (diagonal only): 1.4e3 against
    1.1e4 with these seeds."""
    finals = {}
    for name in ("lm_ma_es", "sep_cma_es"):
        algorithm = make_algorithm(
            name, num_params=100, scales=0.0, noise=noise, seed=1, population_size=17,
            sigma=0.5, center_episodes=0,
        )  # fmt: skip
        for _ in range(1500):
            request = algorithm.ask()
            x = algorithm.decoder.decode_batch(request.genomes).astype(np.float64)
            algorithm.tell(request, -rotated_ellipsoid(x)[:, None])
        finals[name] = float(rotated_ellipsoid(np.asarray(algorithm.center, np.float64)[None])[0])
    assert finals["lm_ma_es"] < finals["sep_cma_es"] / 4, finals
