"""Weighted sums of noise-table slices, the reduction every gradient-style update makes (ES and
its novelty family, PGPE, SNES, CEM, sep-CMA-ES, ARS), in a fixed order, so that every CPU
computes the same bits.

A matrix product (BLAS) is faster, but its summation order follows the CPU's kernel (vector
width, blocking): an update, and with it every later generation, differed in the last bits
between an AVX2 and an AVX-512 machine, so a run could not be replayed elsewhere. Here each
output element is ``sum_i w_i z_i[j]`` accumulated in float64 in the order ``i = 0, 1, ...``
by elementwise numpy operations, which give the same result on every CPU; columns go in
blocks that stay in cache.
"""

from __future__ import annotations

import numpy as np

from neuroevo.genomes.noise import NoiseTable

__all__ = ["noise_moments", "weighted_noise_sum"]

BLOCK = 1 << 14
"""Columns per block: the accumulators and one slice's products (float64) stay in L2."""


def noise_moments(
    noise: NoiseTable,
    indices: np.ndarray,
    weights: np.ndarray,
    square_weights: np.ndarray | None,
    length: int,
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(sum_i weights[i] z_i, sum_i square_weights[i] z_i**2)``, float64 [length] each, with
    ``z_i = noise.get(indices[i], length)``; the second is None when ``square_weights`` is.

    Raises:
        ValueError: a slice outside the table (as :meth:`NoiseTable.get`).
    """
    starts = [int(i) for i in np.asarray(indices).ravel()]
    first_w = np.asarray(weights, np.float64).ravel().tolist()
    second_w = None if square_weights is None else np.asarray(square_weights, np.float64).ravel()
    for start in starts:
        noise.get(start, length)  # bounds, once per slice
    first = np.zeros(length)
    second = None if second_w is None else np.zeros(length)
    product = np.empty(min(BLOCK, length))
    for begin in range(0, length, BLOCK):
        width = min(BLOCK, length - begin)
        out, scratch = first[begin : begin + width], product[:width]
        square = None if second is None else second[begin : begin + width]
        for k, start in enumerate(starts):
            z = noise.get(start + begin, width)
            np.multiply(z, first_w[k], out=scratch, dtype=np.float64)
            out += scratch
            if square is not None:
                np.multiply(z, z, out=scratch, dtype=np.float64)
                scratch *= second_w[k]
                square += scratch
    return first, second


def weighted_noise_sum(
    noise: NoiseTable, indices: np.ndarray, weights: np.ndarray, length: int
) -> np.ndarray:
    """``sum_i weights[i] * noise.get(indices[i], length)``, float64 [length] (see
    :func:`noise_moments`)."""
    return noise_moments(noise, indices, weights, None, length)[0]
