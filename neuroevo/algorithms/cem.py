"""CEM: the cross-entropy method with a diagonal Gaussian (Rubinstein 1999, "The Cross-Entropy
Method for Combinatorial and Continuous Optimization"; for policy search: Szita & Lőrincz 2006,
"Learning Tetris Using the Noisy Cross-Entropy Method", Neural Computation 18(12)).

Each generation refits the Gaussian to the best ``elite_fraction`` of the samples: with
``x_e = m + s_e std z_e`` the e = 1..k elites,

    m'   = mean_e x_e               = m + std * mean_e(s_e z_e)
    std' = std_e(x_e) around m'     = std * sqrt(mean_e(z_e**2) - mean_e(s_e z_e)**2)
    std' = sqrt(std'**2 + extra_std**2)   (Szita & Lőrincz's noise against early collapse)

then limits each std's relative change to ``stdev_max_change`` (as EvoTorch's CEM) and floors
it at ``stdev_min``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuroevo.algorithms.gaussian import (
    GaussianParams,
    GaussianSearch,
    GaussianState,
)
from neuroevo.algorithms.noise_sums import noise_moments
from neuroevo.core.params import check

__all__ = ["CEM", "CEMParams"]


@dataclass(frozen=True)
class CEMParams(GaussianParams):
    """CEM hyperparameters (``algorithm.cem``).

    Attributes:
        population_size: Samples per generation.
        elite_fraction: Share of the samples the Gaussian is refitted to (at least 2).
        extra_std: Constant std added (in quadrature) after each refit; 0 for none.
        stdev_max_change: Largest relative change of each std per generation (null: none).
        stdev_min: Floor of every std (0: none).
    """

    population_size: int = 100
    elite_fraction: float = 0.2
    extra_std: float = 0.0
    stdev_max_change: float | None = None
    stdev_min: float = 0.0

    @property
    def elites(self) -> int:
        """k, the number of samples refitted to."""
        return max(2, math.ceil(self.elite_fraction * self.population_size))

    def _validate(self) -> None:
        super()._validate()
        fraction = self.elite_fraction
        check(0 < fraction <= 1, "elite_fraction", fraction, "in (0, 1]")
        check(self.extra_std >= 0, "extra_std", self.extra_std, ">= 0")
        change = self.stdev_max_change
        check(change is None or 0 < change <= 1, "stdev_max_change", change, "in (0, 1] or null")
        check(self.stdev_min >= 0, "stdev_min", self.stdev_min, ">= 0")


class CEM(GaussianSearch):
    """The cross-entropy method; see the module docstring."""

    name = "cem"
    params_class = CEMParams
    _params: CEMParams

    def _update(
        self, state: GaussianState, fitness: np.ndarray, indices: np.ndarray, signs: np.ndarray
    ) -> tuple[dict[str, Any], dict[str, float]]:
        params = self._params
        k = params.elites
        elite = np.argsort(-fitness, kind="stable")[:k]
        weights = np.full(k, 1.0 / k)
        z_mean, z2_mean = noise_moments(
            self._noise, indices[elite], weights * signs[elite], weights, self._num_params
        )
        center = state.center + state.std * z_mean
        variance = state.std**2 * np.maximum(z2_mean - z_mean**2, 0.0) + params.extra_std**2
        std = np.sqrt(variance)
        if params.stdev_max_change is not None:
            change = params.stdev_max_change
            std = np.clip(std, state.std * (1 - change), state.std * (1 + change))
        std = np.maximum(std, params.stdev_min)
        extras = {"elite_mean": float(fitness[elite].mean())}
        return {"center": center, "std": std}, extras
