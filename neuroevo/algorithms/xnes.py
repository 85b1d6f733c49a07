"""xNES: exponential natural evolution strategies (Glasmachers, Schaul, Sun, Wierstra &
Schmidhuber 2010, "Exponential Natural Evolution Strategies", GECCO; Wierstra et al. 2014,
Algorithm 5), for small networks.

A full Gaussian ``N(m, sigma^2 B B^T)`` with ``det B = 1``. With ``z_k`` the standard normal
noise of sample k and ``u_k`` its NES rank utility
(:func:`~neuroevo.algorithms.gaussian.nes_utilities`):

    G_m     = sum_k u_k z_k
    G_M     = sum_k u_k (z_k z_k^T - I),   G_sigma = tr(G_M) / P,   G_B = G_M - G_sigma I
    m      += center_learning_rate * sigma * B G_m
    sigma  *= exp(sigma_learning_rate / 2 * G_sigma)
    B      <- B expm(b_learning_rate / 2 * G_B)

Defaults: ``center_learning_rate`` 1 and ``sigma_learning_rate = b_learning_rate =
3 (3 + ln P) / (5 P sqrt P)`` (null here). ``expm`` of the symmetric ``G_B`` is taken through
its eigendecomposition, O(P^3) per generation; B takes ``8 P^2`` bytes. Samples are dense
vectors (see :mod:`neuroevo.genomes.genome`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuroevo.algorithms.gaussian import (
    GaussianParams,
    GaussianSearch,
    StepSizeState,
    dense_memory_check,
    nes_utilities,
    stacked_noise,
)
from neuroevo.core.params import check

__all__ = ["XNES", "XNESParams", "XNESState", "symmetric_expm", "xnes_learning_rate"]


def xnes_learning_rate(num_params: int) -> float:
    """xNES's default learning rate of sigma and B, ``3 (3 + ln P) / (5 P sqrt P)``."""
    return 3 * (3 + math.log(num_params)) / (5 * num_params * math.sqrt(num_params))


def symmetric_expm(matrix: np.ndarray) -> np.ndarray:
    """The matrix exponential of a symmetric matrix, ``V diag(exp(lambda)) V^T``."""
    eigenvalues, vectors = np.linalg.eigh((matrix + matrix.T) / 2)
    return (vectors * np.exp(eigenvalues)) @ vectors.T


@dataclass(frozen=True)
class XNESParams(GaussianParams):
    """xNES hyperparameters (``algorithm.xnes``).

    Attributes:
        population_size: Samples per generation (the paper: ``4 + floor(3 ln P)``).
        sigma: Initial step size.
        center_learning_rate: eta_m (the paper: 1).
        sigma_learning_rate: eta_sigma; null means ``3 (3 + ln P) / (5 P sqrt P)``.
        b_learning_rate: eta_B; null means the same.
        max_memory_gb: Refuse a network whose dense matrices need more than this.
    """

    population_size: int = 20
    center_learning_rate: float = 1.0
    sigma_learning_rate: float | None = None
    b_learning_rate: float | None = None
    max_memory_gb: float = 4.0

    def _validate(self) -> None:
        super()._validate()
        rate = self.center_learning_rate
        check(rate > 0, "center_learning_rate", rate, "> 0")
        for name in ("sigma_learning_rate", "b_learning_rate"):
            rate = getattr(self, name)
            check(rate is None or rate >= 0, name, rate, ">= 0 (or null: the paper's)")
        check(self.max_memory_gb > 0, "max_memory_gb", self.max_memory_gb, "> 0")


@dataclass(frozen=True, eq=False, kw_only=True)
class XNESState(StepSizeState):
    """xNES's state (``std`` = ``sigma * |rows of B|``, for reporting; ``sigma`` the global
    step size).

    Attributes:
        basis: float64 [P, P], B with ``det B = 1``.
    """

    basis: np.ndarray


class XNES(GaussianSearch):
    """xNES (Glasmachers et al. 2010); see the module docstring."""

    name = "xnes"
    params_class = XNESParams
    state_class = XNESState
    dense = True
    _params: XNESParams
    _state: XNESState

    def _init_fields(self) -> dict[str, Any]:
        dense_memory_check(self.name, self._num_params, 3, self._params.max_memory_gb)
        return {"sigma": float(self._params.sigma), "basis": np.eye(self._num_params)}

    def _dense_samples(self, state: XNESState, z: np.ndarray) -> np.ndarray:
        return state.center + state.sigma * z @ state.basis.T

    def _update(
        self, state: XNESState, fitness: np.ndarray, indices: np.ndarray, signs: np.ndarray
    ) -> tuple[dict[str, Any], dict[str, float]]:
        params, n = self._params, self._num_params
        z = stacked_noise(self._noise, indices, n) * signs[:, None]
        utilities = nes_utilities(fitness)
        grad_m = utilities @ z
        grad_cov = (z.T * utilities) @ z - utilities.sum() * np.eye(n)
        grad_sigma = float(np.trace(grad_cov)) / n
        grad_b = grad_cov - grad_sigma * np.eye(n)
        default = xnes_learning_rate(n)
        rate_sigma = default if params.sigma_learning_rate is None else params.sigma_learning_rate
        rate_b = default if params.b_learning_rate is None else params.b_learning_rate
        center = state.center + params.center_learning_rate * state.sigma * state.basis @ grad_m
        sigma = state.sigma * math.exp(rate_sigma / 2 * grad_sigma)
        basis = state.basis @ symmetric_expm(rate_b / 2 * grad_b)
        std = sigma * np.linalg.norm(basis, axis=1)
        changes = {"center": center, "sigma": sigma, "basis": basis, "std": std}
        return changes, {"grad_norm": float(np.linalg.norm(grad_m))}
