"""CMA-ES with a full covariance matrix (Hansen & Ostermeier 2001, "Completely Derandomized
Self-Adaptation in Evolution Strategies"; the formulas and defaults of Hansen 2016, "The CMA
Evolution Strategy: A Tutorial", arXiv:1604.00772, with positive recombination weights only).

Samples ``x_k = m + sigma * B D z_k`` (``C = B D^2 B^T``), the ``mu = n/2`` best recombined
with weights ``w_i ~ ln((n + 1)/2) - ln i``; cumulative step-size adaptation on ``p_sigma``,
rank-one (``p_c``) plus rank-mu covariance update; the eigendecomposition is refreshed every
``1 / (10 P (c_1 + c_mu))`` generations, as the tutorial suggests. Each sample is a dense
vector (registered with the decoder and shipped as such), and ``C`` and ``B`` take
``2 * 8 * P^2`` bytes: above ``max_memory_gb`` the constructor refuses and names sep-CMA-ES.
IPOP and BIPOP restarts: the ``restarts`` section (:mod:`neuroevo.algorithms.restarts`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neuroevo.algorithms.gaussian import (
    GaussianParams,
    GaussianSearch,
    StepSizeState,
    dense_memory_check,
    stacked_noise,
)
from neuroevo.algorithms.restarts import RestartParams
from neuroevo.core.params import check

__all__ = [
    "CMAES",
    "CMAESParams",
    "CMAState",
    "PathState",
    "cma_constants",
    "evolution_paths",
    "initial_paths",
]


@dataclass(frozen=True, eq=False, kw_only=True)
class PathState(StepSizeState):
    """What the States of CMA-ES and sep-CMA-ES share: the step size and evolution paths.

    Attributes:
        p_sigma: float64 [P], conjugate evolution path.
        p_c: float64 [P], evolution path of the covariance.
    """

    p_sigma: np.ndarray
    p_c: np.ndarray


def initial_paths(sigma: float, n: int) -> dict[str, Any]:
    """The :class:`PathState` fields at generation 0."""
    return {"sigma": float(sigma), "p_sigma": np.zeros(n), "p_c": np.zeros(n)}


def cma_constants(
    n: int, population: int, separable: bool = False, parents: int | None = None
) -> dict[str, Any]:
    """The tutorial's default strategy parameters for dimension ``n`` (sep-CMA-ES: ``c_1`` and
    ``c_mu`` times ``(n + 2) / 3``, Ros & Hansen 2008). ``parents``: recombine that many
    best samples with weights ``ln(parents + 1/2) - ln i`` (CMA-ME's emitters recombine
    those a generation added to the archive), instead of ``population // 2`` with
    ``ln((population + 1) / 2) - ln i``; the learning rates follow from the weights."""
    mu = population // 2 if parents is None else parents
    top = (population + 1) / 2 if parents is None else parents + 0.5
    raw = math.log(top) - np.log(np.arange(1, mu + 1))
    weights = raw / raw.sum()
    mu_eff = 1.0 / float(np.sum(weights**2))
    c_sigma = (mu_eff + 2) / (n + mu_eff + 5)
    d_sigma = 1 + 2 * max(0.0, math.sqrt((mu_eff - 1) / (n + 1)) - 1) + c_sigma
    c_c = (4 + mu_eff / n) / (n + 4 + 2 * mu_eff / n)
    c_1 = 2 / ((n + 1.3) ** 2 + mu_eff)
    c_mu = min(1 - c_1, 2 * (mu_eff - 2 + 1 / mu_eff) / ((n + 2) ** 2 + mu_eff))
    if separable:
        c_1, c_mu = c_1 * (n + 2) / 3, c_mu * (n + 2) / 3
        c_mu = min(c_mu, 1 - c_1)
    chi_n = math.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n * n))
    return {
        "mu": mu,
        "weights": weights,
        "mu_eff": mu_eff,
        "c_sigma": c_sigma,
        "d_sigma": d_sigma,
        "c_c": c_c,
        "c_1": c_1,
        "c_mu": c_mu,
        "chi_n": chi_n,
    }


def evolution_paths(
    k: dict[str, Any],
    state: PathState,
    whitened_step: np.ndarray,
    y_w: np.ndarray,
    generation: int,
    n: int,
) -> tuple[dict[str, Any], bool, float]:
    """Cumulative step-size adaptation and the covariance's evolution path, shared by CMA-ES
    and sep-CMA-ES (the updates of Hansen 2016's tutorial, with h_sigma). From the state's
    ``sigma``, ``p_sigma`` and ``p_c``, the weighted mean step ``y_w`` and its whitened form
    (``C^-1/2 y_w`` = ``B z_w``; ``z_w`` for the separable case), returns the new ``sigma``,
    ``p_sigma`` and ``p_c`` (the :class:`PathState` changes), ``h_sigma`` and the rank-one
    correction ``delta(h_sigma)``."""
    c_s, c_c, mu_eff = k["c_sigma"], k["c_c"], k["mu_eff"]
    p_sigma = (1 - c_s) * state.p_sigma + math.sqrt(c_s * (2 - c_s) * mu_eff) * whitened_step
    norm = float(np.linalg.norm(p_sigma))
    sigma = state.sigma * math.exp(c_s / k["d_sigma"] * (norm / k["chi_n"] - 1))
    threshold = (1.4 + 2 / (n + 1)) * k["chi_n"]
    h_sigma = norm / math.sqrt(1 - (1 - c_s) ** (2 * (generation + 1))) < threshold
    p_c = (1 - c_c) * state.p_c + h_sigma * math.sqrt(c_c * (2 - c_c) * mu_eff) * y_w
    delta = (1 - h_sigma) * c_c * (2 - c_c)
    return {"sigma": sigma, "p_sigma": p_sigma, "p_c": p_c}, h_sigma, delta


@dataclass(frozen=True)
class CMAESParams(GaussianParams):
    """CMA-ES hyperparameters (``algorithm.cma_es``); the rest are the tutorial's defaults.

    Attributes:
        population_size: lambda (the tutorial: ``4 + floor(3 ln P)``).
        sigma: Initial step size.
        max_memory_gb: Refuse a network whose covariance matrices need more than this.
        restarts: IPOP / BIPOP restarts (:mod:`neuroevo.algorithms.restarts`).
    """

    population_size: int = 20
    sigma: float = 0.1
    max_memory_gb: float = 4.0
    restarts: RestartParams = field(default_factory=RestartParams)

    def _validate(self) -> None:
        super()._validate()
        check(self.population_size >= 4, "population_size", self.population_size, ">= 4")
        check(self.max_memory_gb > 0, "max_memory_gb", self.max_memory_gb, "> 0")


@dataclass(frozen=True, eq=False, kw_only=True)
class CMAState(PathState):
    """CMA-ES's state (``std`` = ``sigma * sqrt(diag C)``, for reporting).

    Attributes:
        cov: float64 [P, P], C.
        basis: float64 [P, P], B (eigenvectors of C at the last decomposition).
        scales: float64 [P], D (square roots of the eigenvalues).
        eigen_generation: Generation of the last decomposition.
    """

    cov: np.ndarray
    basis: np.ndarray
    scales: np.ndarray
    eigen_generation: int = 0


class CMAES(GaussianSearch):
    """CMA-ES (Hansen 2016); see the module docstring."""

    name = "cma_es"
    params_class = CMAESParams
    state_class = CMAState
    dense = True
    _params: CMAESParams
    _state: CMAState

    def _init_fields(self) -> dict[str, Any]:
        n = self._num_params
        dense_memory_check(self.name, n, 3, self._params.max_memory_gb)
        self._constants = cma_constants(n, self._params.population_size)
        return {
            **initial_paths(self._params.sigma, n),
            "cov": np.eye(n),
            "basis": np.eye(n),
            "scales": np.ones(n),
        }

    def _dense_samples(self, state: CMAState, z: np.ndarray) -> np.ndarray:
        return state.center + state.sigma * (z * state.scales) @ state.basis.T

    def _update(
        self, state: CMAState, fitness: np.ndarray, indices: np.ndarray, signs: np.ndarray
    ) -> tuple[dict[str, Any], dict[str, float]]:
        k = self._constants
        n, generation = self._num_params, state.generation
        z = stacked_noise(self._noise, indices, n) * signs[:, None]
        best = np.argsort(-fitness, kind="stable")[: k["mu"]]
        y = (z[best] * state.scales) @ state.basis.T  # (x - m) / sigma of the mu best
        y_w = k["weights"] @ y
        z_w = k["weights"] @ z[best]
        center = state.center + state.sigma * y_w
        paths, h_sigma, delta = evolution_paths(k, state, state.basis @ z_w, y_w, generation, n)
        c_1, c_mu, p_c = k["c_1"], k["c_mu"], paths["p_c"]
        cov = (1 + c_1 * delta - c_1 - c_mu) * state.cov
        cov += c_1 * np.outer(p_c, p_c) + c_mu * (y.T * k["weights"]) @ y
        std = paths["sigma"] * np.sqrt(np.diag(cov))
        changes = {"center": center, **paths, "cov": cov, "std": std}
        if generation + 1 - state.eigen_generation >= max(1, int(1 / (10 * n * (c_1 + c_mu)))):
            cov = (cov + cov.T) / 2
            eigenvalues, basis = np.linalg.eigh(cov)
            changes |= {
                "cov": cov,
                "basis": basis,
                "scales": np.sqrt(np.maximum(eigenvalues, 1e-300)),
                "eigen_generation": generation + 1,
            }
        return changes, {"h_sigma": float(h_sigma)}
