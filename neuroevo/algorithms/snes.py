"""SNES: separable natural evolution strategies (Schaul, Glasmachers & Schmidhuber 2011, "High
Dimensions and Heavy Tails for Natural Evolution Strategies", GECCO; Wierstra et al. 2014,
"Natural Evolution Strategies", JMLR 15, Algorithm 6).

A diagonal Gaussian ``N(m, diag(std^2))`` follows the natural gradient of expected fitness.
With ``z_k`` the standard normal noise of sample k (sign included) and ``u_k`` its NES rank
utility (:func:`~neuroevo.algorithms.gaussian.nes_utilities`):

    grad_m   = sum_k u_k z_k
    grad_std = sum_k u_k (z_k**2 - 1)
    m   += center_learning_rate * std * grad_m
    std *= exp(std_learning_rate / 2 * grad_std)

Paper defaults: ``center_learning_rate`` 1, ``std_learning_rate`` ``(3 + ln P) / (5 sqrt P)``
(null here), population ``4 + floor(3 ln P)``.
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
    nes_utilities,
)
from neuroevo.algorithms.noise_sums import noise_moments
from neuroevo.core.params import check

__all__ = ["SNES", "SNESParams", "snes_std_learning_rate"]


def snes_std_learning_rate(num_params: int) -> float:
    """SNES's default std learning rate, ``(3 + ln P) / (5 sqrt P)``."""
    return (3 + math.log(num_params)) / (5 * math.sqrt(num_params))


@dataclass(frozen=True)
class SNESParams(GaussianParams):
    """SNES hyperparameters (``algorithm.snes``).

    Attributes:
        population_size: Samples per generation (the paper: ``4 + floor(3 ln P)``).
        sigma: Initial per-parameter std.
        center_learning_rate: eta_m (the paper: 1).
        std_learning_rate: eta_std; null means ``(3 + ln P) / (5 sqrt P)``.
    """

    population_size: int = 50
    center_learning_rate: float = 1.0
    std_learning_rate: float | None = None

    def _validate(self) -> None:
        super()._validate()
        rate = self.center_learning_rate
        check(rate > 0, "center_learning_rate", rate, "> 0")
        rate = self.std_learning_rate
        check(rate is None or rate >= 0, "std_learning_rate", rate, ">= 0 (or null: the paper's)")


class SNES(GaussianSearch):
    """SNES (Schaul et al. 2011); see the module docstring."""

    name = "snes"
    params_class = SNESParams
    _params: SNESParams

    def _update(
        self, state: GaussianState, fitness: np.ndarray, indices: np.ndarray, signs: np.ndarray
    ) -> tuple[dict[str, Any], dict[str, float]]:
        params = self._params
        utilities = nes_utilities(fitness)
        grad_m, z2_sum = noise_moments(
            self._noise, indices, utilities * signs, utilities, self._num_params
        )
        grad_std = z2_sum - utilities.sum()
        rate = params.std_learning_rate
        if rate is None:
            rate = snes_std_learning_rate(self._num_params)
        center = state.center + params.center_learning_rate * state.std * grad_m
        std = state.std * np.exp(rate / 2 * grad_std)
        return {"center": center, "std": std}, {"grad_norm": float(np.linalg.norm(grad_m))}
