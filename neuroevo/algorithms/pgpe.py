"""PGPE: policy gradients with parameter-based exploration (Sehnke et al. 2010, "Parameter-
exploring policy gradients", Neural Networks 23(4)), with the ClipUp optimizer of Toklu,
Liskowski & Srivastava 2020 ("ClipUp: A Simple and Powerful Optimizer for Distribution-based
Policy Evolution", PPSN XVI), as in their experiments and EvoTorch's ``PGPE``.

Symmetric sampling: each of the n/2 directions ``eps_i = sigma * z_i`` is evaluated as the
pair ``m + eps_i`` and ``m - eps_i``. With ``r`` the centred ranks (in [-0.5, 0.5]) of all n
fitness values and ``r+_i``, ``r-_i`` those of a pair:

    g_m     = sum_i (r+_i - r-_i) / 2 * eps_i / (n/2)
    g_sigma = sum_i (r+_i + r-_i) / 2 * (eps_i**2 - sigma**2) / sigma / (n/2)
    m      += optimizer(g_m)                       (clipup, adam or sgd; ascent)
    sigma  += stdev_learning_rate * g_sigma,  clipped to sigma * (1 +- stdev_max_change)

The ranks have mean 0, so ``(r+ + r-) / 2`` needs no baseline. ``radius_init`` (the ClipUp
paper's way to set the initial std) gives ``sigma = radius_init / sqrt(P)``.
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
from neuroevo.algorithms.optimizers import CenterOptimizerParams, center_step
from neuroevo.algorithms.shaping import centered_ranks
from neuroevo.core.params import check

__all__ = ["PGPE", "PGPEParams", "PGPEState"]


@dataclass(frozen=True)
class PGPEParams(CenterOptimizerParams, GaussianParams):
    """PGPE hyperparameters (``algorithm.pgpe``); defaults follow the ClipUp paper (the centre
    optimizer's keys: :class:`~neuroevo.algorithms.optimizers.CenterOptimizerParams`', ClipUp).

    Attributes:
        population_size: Samples per generation (n/2 symmetric pairs).
        sigma: Initial per-parameter std (ignored when ``radius_init`` is set).
        radius_init: Initial ``|sigma|`` (Euclidean norm over all P stds), or null.
        mirrored: Must be true (PGPE samples symmetrically).
        stdev_learning_rate: Step size of the std update.
        stdev_max_change: Largest relative change of each std per generation.
        stdev_min: Floor of every std (0: none).
    """

    population_size: int = 100
    sigma: float = 0.1
    radius_init: float | None = None
    mirrored: bool = True
    optimizer: str = "clipup"
    learning_rate: float = 0.075
    stdev_learning_rate: float = 0.1
    stdev_max_change: float = 0.2
    stdev_min: float = 0.0

    def _validate(self) -> None:
        super()._validate()
        check(self.mirrored, "mirrored", self.mirrored, "true (PGPE samples symmetric pairs)")
        radius = self.radius_init
        check(radius is None or radius > 0, "radius_init", radius, "> 0 (or null: use sigma)")
        self._validate_optimizer()
        rate = self.stdev_learning_rate
        check(rate >= 0, "stdev_learning_rate", rate, ">= 0 (0 keeps sigma fixed)")
        change = self.stdev_max_change
        check(0 < change <= 1, "stdev_max_change", change, "in (0, 1]")
        check(self.stdev_min >= 0, "stdev_min", self.stdev_min, ">= 0")


@dataclass(frozen=True, eq=False, kw_only=True)
class PGPEState(GaussianState):
    """PGPE's state: the Gaussian's (mean, std) plus the centre optimizer's.

    Attributes:
        opt_m: float64 [P], Adam's first moment or the velocity of clipup / sgd.
        opt_v: float64 [P], Adam's second moment (zero otherwise).
    """

    opt_m: np.ndarray
    opt_v: np.ndarray


class PGPE(GaussianSearch):
    """PGPE with ClipUp (Sehnke et al. 2010, Toklu et al. 2020); see the module docstring."""

    name = "pgpe"
    params_class = PGPEParams
    state_class = PGPEState
    _params: PGPEParams
    _state: PGPEState

    def _init_fields(self) -> dict[str, Any]:
        n = self._num_params
        fields = {"opt_m": np.zeros(n), "opt_v": np.zeros(n)}
        if self._params.radius_init is not None:
            fields["std"] = np.full(n, self._params.radius_init / math.sqrt(n))
        return fields

    def _update(
        self, state: PGPEState, fitness: np.ndarray, indices: np.ndarray, signs: np.ndarray
    ) -> tuple[dict[str, Any], dict[str, float]]:
        params = self._params
        ranks = centered_ranks(fitness)
        plus, minus = ranks[0::2], ranks[1::2]
        pairs = len(plus)
        z_sum, z2_sum = noise_moments(
            self._noise, indices[0::2], (plus - minus) / 2, (plus + minus) / 2, self._num_params
        )
        sigma = state.std
        grad_m = sigma * z_sum / pairs
        # (eps^2 - sigma^2) / sigma = sigma * (z^2 - 1); sum_i (r+ + r-)/2 is 0.
        grad_sigma = sigma * (z2_sum - ((plus + minus) / 2).sum()) / pairs
        step, m, v = center_step(params, grad_m, state.opt_m, state.opt_v, state.generation + 1)
        change = params.stdev_max_change
        new_sigma = np.clip(
            sigma + params.stdev_learning_rate * grad_sigma,
            sigma * (1 - change),
            sigma * (1 + change),
        )
        new_sigma = np.maximum(new_sigma, params.stdev_min)
        extras = {
            "grad_norm": float(np.linalg.norm(grad_m)),
            "step_norm": float(np.linalg.norm(step)),
        }
        changes = {"center": state.center + step, "std": new_sigma, "opt_m": m, "opt_v": v}
        return changes, extras
