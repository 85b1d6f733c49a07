"""sep-CMA-ES: CMA-ES with a diagonal covariance matrix (Ros & Hansen 2008, "A Simple
Modification in CMA-ES Achieving Linear Time and Space Complexity", PPSN X).

The updates of :mod:`neuroevo.algorithms.cma_es` with ``C = diag(c)``: ``B = I``, ``D =
sqrt(c)``, outer products become squares, and the covariance learning rates ``c_1``, ``c_mu``
are multiplied by ``(P + 2) / 3`` (the paper's faster learning of a diagonal). Time and memory
are O(P) per sample, so it runs on networks of 10^5-10^6 parameters. A sample is
``m + sigma * sqrt(c) * z``: the genome is a centre plus a registered scale vector
``sigma * sqrt(c)`` times a noise slice, a few integers on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neuroevo.algorithms.cma_es import PathState, cma_constants, evolution_paths, initial_paths
from neuroevo.algorithms.gaussian import (
    GaussianParams,
    GaussianSearch,
)
from neuroevo.algorithms.noise_sums import noise_moments
from neuroevo.algorithms.restarts import RestartParams
from neuroevo.core.params import check

__all__ = ["SepCMAES", "SepCMAESParams", "SepCMAState"]


@dataclass(frozen=True)
class SepCMAESParams(GaussianParams):
    """sep-CMA-ES hyperparameters (``algorithm.sep_cma_es``); the rest are the tutorial's.

    Attributes:
        population_size: lambda (the tutorial: ``4 + floor(3 ln P)``).
        sigma: Initial step size.
        restarts: IPOP / BIPOP restarts (:mod:`neuroevo.algorithms.restarts`).
    """

    population_size: int = 20
    sigma: float = 0.1
    restarts: RestartParams = field(default_factory=RestartParams)

    def _validate(self) -> None:
        super()._validate()
        check(self.population_size >= 4, "population_size", self.population_size, ">= 4")


@dataclass(frozen=True, eq=False, kw_only=True)
class SepCMAState(PathState):
    """sep-CMA-ES's state (``std`` = ``sigma * sqrt(c)``, the registered scale vector).

    Attributes:
        cov: float64 [P], the diagonal c of C.
    """

    cov: np.ndarray


class SepCMAES(GaussianSearch):
    """sep-CMA-ES (Ros & Hansen 2008); see the module docstring."""

    name = "sep_cma_es"
    params_class = SepCMAESParams
    state_class = SepCMAState
    _params: SepCMAESParams
    _state: SepCMAState

    def _init_fields(self) -> dict[str, Any]:
        n = self._num_params
        self._constants = cma_constants(n, self._params.population_size, separable=True)
        return {**initial_paths(self._params.sigma, n), "cov": np.ones(n)}

    def _update(
        self, state: SepCMAState, fitness: np.ndarray, indices: np.ndarray, signs: np.ndarray
    ) -> tuple[dict[str, Any], dict[str, float]]:
        k = self._constants
        n, generation = self._num_params, state.generation
        best = np.argsort(-fitness, kind="stable")[: k["mu"]]
        weights = k["weights"]
        z_w, z2_w = noise_moments(self._noise, indices[best], weights * signs[best], weights, n)
        d = np.sqrt(state.cov)
        y_w = d * z_w
        center = state.center + state.sigma * y_w
        paths, h_sigma, delta = evolution_paths(k, state, z_w, y_w, generation, n)
        c_1, c_mu, p_c = k["c_1"], k["c_mu"], paths["p_c"]
        # sum_i w_i y_i**2 = c * sum_i w_i z_i**2 (y = sqrt(c) z, signs square away).
        cov = (1 + c_1 * delta - c_1 - c_mu) * state.cov + c_1 * p_c**2 + c_mu * state.cov * z2_w
        changes = {"center": center, **paths, "cov": cov, "std": paths["sigma"] * np.sqrt(cov)}
        return changes, {"h_sigma": float(h_sigma)}
