"""LM-MA-ES: the limited-memory matrix adaptation evolution strategy (Loshchilov, Glasmachers &
Beyer 2017, "Large Scale Black-box Optimization by Limited-Memory Matrix Adaptation",
arXiv:1705.06693, Algorithm 1; IEEE TEC 23(2), 2019).

CMA-ES learns a full covariance matrix (O(P^2) memory), sep-CMA-ES only its diagonal, which
cannot follow correlations between weights. LM-MA-ES keeps ``m`` direction vectors
``M_1..M_m`` (O(m P) memory, ``m = 4 + floor(3 ln P)`` by default, 29 for a 5k-weight policy)
and shapes each standard normal ``z`` by ``m`` cheap rank-one transformations:

    d = z;  for j = 1..min(t, m):  d = (1 - c_d,j) d + c_d,j M_j (M_j^T d)
    x = y + sigma d

After selecting the ``mu`` best (recombination weights of CMA-ES), with ``z_w`` and ``d_w`` the
weighted sums of their ``z`` and ``d``:

    y      <- y + sigma d_w
    p_s    <- (1 - c_s) p_s + sqrt(mu_w c_s (2 - c_s)) z_w
    M_j    <- (1 - c_c,j) M_j + sqrt(mu_w c_c,j (2 - c_c,j)) z_w        (j = 1..m)
    sigma  <- sigma exp(c_s / d_s (|p_s|^2 / P - 1))                    (d_s = 2)

with ``c_s = 2 lambda / P``, ``c_c,j = lambda / (4^(j-1) P)``, ``c_d,j = 1 / (1.5^(j-1) P)``.
The paper states these for large P (``lambda << P``, a neural network's case). Below
``P = 2 lambda`` they would leave the unit interval (``c_s > 1``) and the transformation
``c_d,1 = 1/P`` would be strong enough to blow up (on a 2-D sphere with ``lambda = 32`` the step
size grows without bound), so there the three rates are computed with ``max(P, 2 lambda)`` in
place of P; at and above that size they are the paper's.

Genomes are not compact: ``d`` is ``a z + sum_j b_j M_j`` with coefficients ``b_j`` that depend
on ``z`` itself, not a per-parameter scaling of one noise slice, so each sample is registered
and shipped as a dense float32 [P] vector, as for full CMA-ES. A compact form (ship ``y`` and the
m vectors once per generation, a genome being a noise index and m + 1 coefficients) would move
fewer bytes only when ``lambda`` exceeds ``m + 1``, which the default population does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neuroevo.algorithms.cma_es import cma_constants
from neuroevo.algorithms.gaussian import (
    GaussianParams,
    GaussianSearch,
    StepSizeState,
    stacked_noise,
)
from neuroevo.algorithms.restarts import RestartParams
from neuroevo.core.params import check

__all__ = ["LMMAES", "LMMAESParams", "LMMAState", "lm_ma_constants"]


@dataclass(frozen=True)
class LMMAESParams(GaussianParams):
    """LM-MA-ES hyperparameters (``algorithm.lm_ma_es``); the rest are the paper's.

    Attributes:
        population_size: lambda (the paper: ``4 + floor(3 ln P)``, which it reports as the
            stable choice; larger populations tend to destabilise the step size).
        sigma: Initial step size.
        memory: m, the number of direction vectors; null takes the paper's
            ``4 + floor(3 ln P)``.
        restarts: IPOP / BIPOP restarts (:mod:`neuroevo.algorithms.restarts`).
    """

    population_size: int = 20
    sigma: float = 0.1
    memory: int | None = None
    restarts: RestartParams = field(default_factory=RestartParams)

    def _validate(self) -> None:
        super()._validate()
        check(self.population_size >= 4, "population_size", self.population_size, ">= 4")
        check(self.memory is None or self.memory >= 1, "memory", self.memory, ">= 1 or null")


@dataclass(frozen=True, eq=False, kw_only=True)
class LMMAState(StepSizeState):
    """LM-MA-ES's state (``std``: ``sigma`` times the root mean square of the last
    generation's directions ``d`` per parameter, a sample estimate of ``sqrt(diag C)`` for
    reporting; the exact diagonal would cost O(m P^2)).

    Attributes:
        p_sigma: float64 [P], the evolution path of the step size.
        directions: float64 [m, P], the vectors M_1..M_m.
    """

    p_sigma: np.ndarray
    directions: np.ndarray


def lm_ma_constants(n: int, population: int, memory: int) -> dict[str, Any]:
    """The paper's constants for dimension ``n``: the CMA-ES recombination weights and
    ``mu_eff`` (from :func:`~neuroevo.algorithms.cma_es.cma_constants`), ``c_sigma``,
    ``d_sigma`` and the per-vector rates ``c_c`` and ``c_d`` (float64 [m]); the rates take
    ``max(n, 2 population)`` for n (see the module docstring)."""
    base = cma_constants(n, population)
    j = np.arange(memory, dtype=np.float64)
    rated = max(n, 2 * population)
    return {
        "mu": base["mu"],
        "weights": base["weights"],
        "mu_eff": base["mu_eff"],
        "c_sigma": 2 * population / rated,
        "d_sigma": 2.0,
        "c_c": population / (4.0**j * rated),
        "c_d": 1.0 / (1.5**j * rated),
    }


def transform(z: np.ndarray, directions: np.ndarray, c_d: np.ndarray, used: int) -> np.ndarray:
    """float64 [n, P]: the directions ``d`` of standard normal rows ``z`` [n, P] through the
    first ``used`` vectors of ``directions`` [m, P], in the paper's order (M_1 first)."""
    d = z
    for j in range(used):
        d = (1 - c_d[j]) * d + c_d[j] * np.outer(d @ directions[j], directions[j])
    return d


class LMMAES(GaussianSearch):
    """LM-MA-ES (Loshchilov et al. 2017); see the module docstring."""

    name = "lm_ma_es"
    params_class = LMMAESParams
    state_class = LMMAState
    dense = True
    _params: LMMAESParams
    _state: LMMAState

    def _init_fields(self) -> dict[str, Any]:
        n, params = self._num_params, self._params
        memory = 4 + int(3 * math.log(n)) if params.memory is None else params.memory
        self._constants = lm_ma_constants(n, params.population_size, memory)
        return {
            "sigma": float(params.sigma),
            "p_sigma": np.zeros(n),
            "directions": np.zeros((memory, n)),
        }

    def _directions(self, state: LMMAState, z: np.ndarray) -> np.ndarray:
        """The generation's directions ``d`` from its normal rows ``z``: the paper uses
        ``min(t, m)`` vectors in generation t (none are learnt before the first update)."""
        used = min(state.generation, len(state.directions))
        return transform(z, state.directions, self._constants["c_d"], used)

    def _dense_samples(self, state: LMMAState, z: np.ndarray) -> np.ndarray:
        return state.center + state.sigma * self._directions(state, z)

    def _update(
        self, state: LMMAState, fitness: np.ndarray, indices: np.ndarray, signs: np.ndarray
    ) -> tuple[dict[str, Any], dict[str, float]]:
        k, n = self._constants, self._num_params
        z = stacked_noise(self._noise, indices, n) * signs[:, None]
        d = self._directions(state, z)
        best = np.argsort(-fitness, kind="stable")[: k["mu"]]
        weights, mu_eff = k["weights"], k["mu_eff"]
        z_w, d_w = weights @ z[best], weights @ d[best]
        c_s, c_c = k["c_sigma"], k["c_c"]
        p_sigma = (1 - c_s) * state.p_sigma + math.sqrt(mu_eff * c_s * (2 - c_s)) * z_w
        rates = np.sqrt(mu_eff * c_c * (2 - c_c))
        directions = (1 - c_c)[:, None] * state.directions + rates[:, None] * z_w
        squared = float(p_sigma @ p_sigma)
        sigma = state.sigma * math.exp(c_s / k["d_sigma"] * (squared / n - 1))
        changes = {
            "center": state.center + state.sigma * d_w,
            "p_sigma": p_sigma,
            "directions": directions,
            "sigma": sigma,
            "std": sigma * np.sqrt(np.mean(d**2, axis=0)),
        }
        return changes, {"path_norm": math.sqrt(squared / n)}
