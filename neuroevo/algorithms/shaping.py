"""Fitness shaping: pure functions from raw fitness to the weights an update uses.

Every shaping function has one signature, ``(fitness: float64 [n]) -> float64 [n]``, and
higher fitness always maps to a higher (or equal) weight, because neuroevo maximises. They are
picked by name from :data:`SHAPING` (config stays a plain string, code stays a function).

Non-finite fitness (a crashed or diverged episode) is not the shaping functions' business:
the NaN policy (:mod:`neuroevo.algorithms.nan_policy`) runs first and turns it into a finite
value strictly below every real one, so it ranks last and can never drive an update towards
it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = [
    "SHAPING",
    "SIGN_RETURN_SHAPINGS",
    "ShapingFn",
    "centered_ranks",
    "identity",
    "standardize",
]

ShapingFn = Callable[[np.ndarray], np.ndarray]


def centered_ranks(fitness: np.ndarray) -> np.ndarray:
    """Maps fitness to its rank, rescaled to [-0.5, 0.5] (Salimans et al. 2017).

    Ranks make the update invariant to any monotone transform of the returns, so one lucky
    episode cannot dominate the gradient. The worst gets -0.5, the best 0.5; ties are broken
    by position (a stable sort: of two equal values, the earlier ranks lower), so the result
    is deterministic. The ES starter's ``compute_ranks`` sorts with numpy's default
    (unstable) quicksort instead, which leaves the order of ties unspecified.

    Args:
        fitness: float [n].

    Returns:
        float64 [n], summing to 0; all zeros when n == 1.
    """
    n = fitness.size
    ranks = np.empty(n, dtype=np.float64)
    ranks[np.argsort(fitness, kind="stable")] = np.arange(n, dtype=np.float64)
    return ranks / max(n - 1, 1) - (0.5 if n > 1 else 0.0)


def standardize(fitness: np.ndarray) -> np.ndarray:
    """Maps fitness to zero mean, unit std (all zeros if every value is the same).

    Args:
        fitness: float [n].

    Returns:
        float64 [n].
    """
    fitness = np.asarray(fitness, dtype=np.float64)
    std = fitness.std()
    return (fitness - fitness.mean()) / std if std > 0 else np.zeros_like(fitness)


def identity(fitness: np.ndarray) -> np.ndarray:
    """Returns the raw fitness as float64 [n] (no shaping)."""
    return np.asarray(fitness, dtype=np.float64).copy()


SHAPING: dict[str, ShapingFn] = {
    "centered_rank": centered_ranks,
    "centered_sign_rank": centered_ranks,
    "standardize": standardize,
    "identity": identity,
}
"""Shaping functions by config name."""

SIGN_RETURN_SHAPINGS = frozenset({"centered_sign_rank"})
"""Shapings applied to sign returns (per episode, the sum of ``sign(reward)``) instead of
returns: Uber's ``return_proc_mode: centered_sign_rank`` (deep-neuroevolution,
``es_distributed/es.py``), which ranks how many steps scored, not how much they scored."""
