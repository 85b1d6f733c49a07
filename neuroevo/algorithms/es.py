"""Evolution strategies of Salimans et al. 2017, "Evolution Strategies as a Scalable
Alternative to Reinforcement Learning" (OpenAI ES).

Each generation perturbs the centre theta with noise slices eps_i, evaluates
``theta +- sigma * eps_i`` (mirrored pairs share their episode seeds), shapes the fitness into
centred ranks and ascends the estimated gradient with Adam and L2 weight decay:

    g = sum_i w_i * eps_i / n          (w = shaped fitness; +/- difference for pairs)
    theta += adam(g - l2_coeff * theta)

The centre optimizer is swappable (``optimizer: adam | sgd | clipup``, see
:mod:`neuroevo.algorithms.optimizers`); Adam is the paper's.

As in the authors' code (evolution-strategies-starter), ``g`` is not divided by sigma: Adam
is invariant to that scale, and the paper's ``l2_coeff`` = 0.005 is calibrated without it.
Optionally (``center_episodes > 0``) the new centre is evaluated in a "center" phase; its score
is the summary's ``elite_score``.

Paper defaults (Atari): population 5000, sigma 0.02, Adam step size 0.01, L2 0.005.

OpenAI ES is the Gaussian family's isotropic member
(:class:`~neuroevo.algorithms.gaussian.GaussianSearch`): its std is one fixed sigma, and only
the update differs, a gradient-following step of the centre, as evosax's OpenES.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from neuroevo.algorithms.base import PhaseResult, PopulationParams, Stream
from neuroevo.algorithms.centered import CenteredState
from neuroevo.algorithms.gaussian import GaussianSearch
from neuroevo.algorithms.noise_sums import weighted_noise_sum
from neuroevo.algorithms.optimizers import CenterOptimizerParams, center_step
from neuroevo.algorithms.shaping import SHAPING, SIGN_RETURN_SHAPINGS
from neuroevo.core.params import check, check_choice
from neuroevo.evaluation.request import Phase

__all__ = ["ES", "ESParams", "ESState"]


@dataclass(frozen=True)
class ESParams(CenterOptimizerParams, PopulationParams):
    """ES hyperparameters; defaults follow Salimans et al. 2017 (Atari).

    This is the ``algorithm.es`` section of the training config. The centre optimizer's keys
    are :class:`~neuroevo.algorithms.optimizers.CenterOptimizerParams`' (Adam, the paper's).

    Attributes:
        population_size: Perturbations per generation (even when mirrored: n/2 pairs).
        sigma: Std of the parameter noise.
        l2_coeff: L2 weight decay coefficient.
        mirrored: Evaluate each eps as the pair +eps/-eps (antithetic sampling).
        fitness_shaping: Name of the fitness shaping in
            :data:`~neuroevo.algorithms.shaping.SHAPING`; ``centered_sign_rank`` ranks each
            perturbation's sign returns (sum of ``sign(reward)`` per episode), as Uber's
            ``return_proc_mode`` does.
        population_episodes: Episodes per perturbation.
        center_episodes: Episodes spent on the new centre each generation; 0 skips it.
        action_noise_std: Std of Gaussian noise added to every action of the perturbations'
            episodes (not the centre's), continuous-action envs only; 0 turns it off. The
            ES starter's MuJoCo configs use 0.01 (``ac_noise_std``).
    """

    renamed: ClassVar[Mapping[str, str]] = {
        **PopulationParams.renamed,
        "eval_center": "center_episodes",
    }

    population_size: int = 5000
    sigma: float = 0.02
    learning_rate: float = 0.01
    l2_coeff: float = 0.005
    mirrored: bool = True
    fitness_shaping: str = "centered_rank"
    center_episodes: int = 1
    action_noise_std: float = 0.0

    def _validate(self) -> None:
        self._validate_population()
        n = self.population_size
        check(
            not self.mirrored or n % 2 == 0,
            "population_size",
            n,
            "even when mirrored is true (perturbations come in +/- pairs)",
        )
        check(self.sigma > 0, "sigma", self.sigma, "> 0")
        self._validate_optimizer()
        check(self.l2_coeff >= 0, "l2_coeff", self.l2_coeff, ">= 0")
        check_choice(self.fitness_shaping, SHAPING, "fitness_shaping")
        noise_std = self.action_noise_std
        check(
            math.isfinite(noise_std) and noise_std >= 0,
            "action_noise_std",
            noise_std,
            "a finite number >= 0 (0 turns action noise off)",
        )
        check(
            self.center_episodes >= 0,
            "center_episodes",
            self.center_episodes,
            ">= 0 (0 skips the centre evaluation)",
        )


@dataclass(frozen=True, eq=False, kw_only=True)
class ESState(CenteredState):
    """Everything that changes during an ES run (``center`` is the float32 theta).

    Attributes:
        adam_m: float32 [P], Adam's first moment (the velocity of ``sgd`` and ``clipup``).
        adam_v: float32 [P], Adam's second moment (zero for the other optimizers).
    """

    adam_m: np.ndarray
    adam_v: np.ndarray


class ES(GaussianSearch):
    """OpenAI ES (Salimans et al. 2017); see the module docstring.

    ``ES(num_params, scales, noise, seed, params=ESParams(...))``: the initial centre is
    ``scales * noise`` at a seeded index (use ``scales=0`` to start from zeros).
    """

    name = "es"
    params_class = ESParams
    _params: ESParams
    _state: ESState

    @property
    def _id_stride(self) -> int:
        """One id per generation, the centre's: a sample is ``centre + sigma * eps``."""
        return 1

    def _init_state(self) -> ESState:
        rng = self._rng(0, Stream.INIT)
        index = self._noise.sample_index(rng, self._num_params)
        center = self._decoder.scales * self._noise.get(index, self._num_params)
        zeros = np.zeros(self._num_params, dtype=np.float32)
        state = ESState(
            generation=0,
            phase=Phase.POPULATION,
            center_id=0,
            center=center,
            adam_m=zeros,
            adam_v=zeros.copy(),
        )
        self._register(state)
        return state

    def _register(self, state: ESState) -> None:
        self._decoder.set_center(state.center_id, state.center)

    def _noise_scale(self, center_id: int) -> tuple[float, int]:
        """``sigma`` times the noise slice, no scale vector."""
        return self._params.sigma, -1

    def _fitness_to_shape(self, result: PhaseResult) -> np.ndarray:
        """The per-genome values the fitness shaping ranks: sign returns for sign-rank
        shapings, else the fitness."""
        shaping = self._params.fitness_shaping
        if shaping not in SIGN_RETURN_SHAPINGS:
            return result.fitness
        if result.sign_fitness is None:
            raise ValueError(
                f"fitness_shaping {shaping!r} ranks sign returns: pass "
                "tell(request, returns, sign_returns=...) (EvalResults.sign_returns)"
            )
        return result.sign_fitness

    def _ascent_step(
        self, shaped: np.ndarray, indices: np.ndarray, center: np.ndarray, adam: tuple, step: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, float]]:
        """One optimizer step of ``center`` along the shaped fitness (float64 [n]) of the
        perturbations at noise ``indices`` (one per mirrored pair); ``adam`` is (m, v),
        ``step`` the Adam step from 1.

        Returns:
            (new centre, m, v, extras with ``grad_norm`` and ``update_ratio``).
        """
        params = self._params
        weights = shaped[0::2] - shaped[1::2] if params.mirrored else shaped
        gradient = weighted_noise_sum(self._noise, indices, weights, self._num_params).astype(
            np.float32
        )
        gradient /= shaped.size
        gradient -= np.float32(params.l2_coeff) * center
        delta, m, v = center_step(params, gradient, adam[0], adam[1], step)
        new_center = center + delta
        extras = {
            "grad_norm": float(np.linalg.norm(gradient)),
            "update_ratio": float(np.linalg.norm(delta) / max(np.linalg.norm(new_center), 1e-12)),
        }
        return new_center, m, v, extras

    def _update(
        self, state: ESState, fitness: np.ndarray, indices: np.ndarray, signs: np.ndarray
    ) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        shaped = SHAPING[self._params.fitness_shaping](fitness)
        pairs = indices[0::2] if self._params.mirrored else indices
        adam = (state.adam_m, state.adam_v)
        center, m, v, extras = self._ascent_step(
            shaped, pairs, state.center, adam, state.generation + 1
        )
        return {"center": center, "adam_m": m, "adam_v": v}, extras

    def _reported_sigma(self, state: object) -> float:
        return float(self._params.sigma)
