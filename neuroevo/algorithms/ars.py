"""ARS: augmented random search (Mania, Guy & Recht 2018, "Simple random search of static
linear policies is competitive for reinforcement learning", NeurIPS; Algorithm 2).

Each generation draws N directions ``delta_k`` (standard normal noise slices) and evaluates
the pairs ``M + nu delta_k`` and ``M - nu delta_k`` (mirrored, sharing their episode seeds).
With ``r+_k``, ``r-_k`` the pair's returns, the b directions with the largest
``max(r+_k, r-_k)`` are kept ("ARS-t"; b = N keeps all) and

    M += learning_rate / (b * sigma_R) * sum_{k in top b} (r+_k - r-_k) delta_k

where ``sigma_R`` is the standard deviation of the 2b returns used (no update when it is 0).
Rewards are raw (no ranks): the step size adapts through ``sigma_R`` instead.

ARS V1 and V2 differ only in the policy's input: V2 normalises observations by the running
mean and std of every state visited in training, which is the model's
``observation_normalization`` with ``obs_stats_fraction: 1`` (the statistics are frozen within
a generation and updated after it, as in the authors' code). The paper's policies are linear
(an ``mlp`` with no hidden layer) and start at ``M = 0`` (``center_init: zeros``). ARS
subtracts the per-step alive bonus from the training rewards of Hopper, Walker2d, Ant and
Humanoid: ``env.decrease_training_rewards_by``.

Samples are ``ESGenome``s of the Gaussian family with the constant std ``sigma`` (nu) as the
scale vector, so a genome is a few integers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from neuroevo.algorithms.gaussian import (
    GaussianParams,
    GaussianSearch,
    GaussianState,
)
from neuroevo.algorithms.noise_sums import noise_moments
from neuroevo.core.params import check, check_choice

__all__ = ["ARS", "ARSParams", "top_directions"]

CENTER_INITS = ("zeros", "model")
"""``zeros``: the paper's ``M_0 = 0``; ``model``: the model's initialisation, as the other
strategies start (for networks with hidden layers, where zeros would be a saddle)."""


@dataclass(frozen=True)
class ARSParams(GaussianParams):
    """ARS hyperparameters (``algorithm.ars``); defaults are the paper's Hopper-v1 settings
    (Table 9: N = 8, b = 4, alpha = 0.01, nu = 0.025).

    Attributes:
        population_size: Samples per generation, 2N (N directions, each as a +/- pair).
        sigma: nu, the std of the exploration noise (fixed).
        learning_rate: alpha, the step size.
        top_directions: b, the directions kept per update (null: all N, ARS V1/V2 without -t).
        mirrored: Must be true (ARS evaluates each direction as a +/- pair).
        center_init: ``zeros`` (the paper) or ``model`` (the model's initialisation).
    """

    population_size: int = 16
    sigma: float = 0.025
    mirrored: bool = True
    learning_rate: float = 0.01
    top_directions: int | None = 4
    center_init: str = "zeros"

    def _validate(self) -> None:
        super()._validate()
        check(self.mirrored, "mirrored", self.mirrored, "true (ARS evaluates +/- pairs)")
        check(self.learning_rate > 0, "learning_rate", self.learning_rate, "> 0")
        directions = self.population_size // 2
        top = self.top_directions
        check(
            top is None or 1 <= top <= directions,
            "top_directions",
            top,
            f"in [1, {directions}] (population_size / 2 directions) or null (all)",
        )
        check_choice(self.center_init, CENTER_INITS, "center_init")


def top_directions(plus: np.ndarray, minus: np.ndarray, count: int) -> np.ndarray:
    """Indices of the ``count`` directions with the largest ``max(plus, minus)``, best first
    (ties: the earlier direction first).

    The authors' code keeps every direction at or above a percentile, which may keep more than
    ``count`` on ties; this keeps exactly ``count``.
    """
    best = np.maximum(plus, minus)
    return np.argsort(-best, kind="stable")[:count]


class ARS(GaussianSearch):
    """ARS (Mania et al. 2018); see the module docstring."""

    name = "ars"
    params_class = ARSParams
    _params: ARSParams
    _state: GaussianState

    def _init_fields(self) -> dict[str, Any]:
        if self._params.center_init == "zeros":
            return {"center": np.zeros(self._num_params)}
        return {}

    def _update(
        self, state: GaussianState, fitness: np.ndarray, indices: np.ndarray, signs: np.ndarray
    ) -> tuple[dict[str, Any], dict[str, float]]:
        params = self._params
        plus, minus = fitness[0::2], fitness[1::2]
        count = len(plus) if params.top_directions is None else params.top_directions
        kept = top_directions(plus, minus, count)
        used = np.concatenate([plus[kept], minus[kept]])
        spread = float(used.std())
        extras = {"reward_std": spread, "top_max": float(used.max())}
        if spread == 0.0:  # every kept episode scored the same: no direction to follow
            return {}, extras | {"step_norm": 0.0}
        weights = (plus[kept] - minus[kept]) / (count * spread)
        direction, _ = noise_moments(
            self._noise, indices[0::2][kept], weights, np.zeros(count), self._num_params
        )
        step = params.learning_rate * direction
        extras["step_norm"] = float(np.linalg.norm(step))
        return {"center": state.center + step}, extras
