"""Genetic algorithm of Such et al. 2017, "Deep Neuroevolution: Genetic Algorithms Are a
Competitive Alternative for Training Deep Neural Networks for Reinforcement Learning".

A simple GA: no crossover, truncation selection, Gaussian mutation, one elite. Each
generation keeps the elite unchanged and fills the other N - 1 slots with children of parents
drawn uniformly from the top T of the population; a child is its parent's seed chain plus one
``(noise_index, sigma)``, so it costs one multiply-add to materialise from a cached parent.
The elite is chosen by re-evaluating the best candidates on extra episodes (the phases are
described in :mod:`neuroevo.algorithms.random_search`, which this class extends).

Paper defaults (Atari): N = 1000, T = 20, sigma = 0.002, 10 candidates x 30 episodes.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from neuroevo.algorithms.base import Stream, require
from neuroevo.algorithms.random_search import RandomSearch, RandomSearchParams
from neuroevo.genome import GAGenome

__all__ = ["GA", "Decay", "GAParams", "SigmaSchedule"]


class Decay(str, enum.Enum):
    """How a :class:`SigmaSchedule` moves from its initial to its final value."""

    LINEAR = "linear"
    EXPONENTIAL = "exponential"


@dataclass(frozen=True)
class SigmaSchedule:
    """A mutation power that decays from ``initial`` to ``final`` over ``generations``.

    Attributes:
        initial: Sigma at generation 0.
        final: Sigma from generation ``generations`` on.
        generations: Length of the decay.
        decay: Linear interpolation, or exponential (geometric) interpolation.
    """

    initial: float
    final: float
    generations: int
    decay: Decay = Decay.LINEAR

    def __post_init__(self) -> None:
        require(
            self.initial > 0 and self.final > 0,
            f"SigmaSchedule initial and final must be > 0, got {self.initial} and {self.final}",
        )
        require(
            self.generations >= 1, f"SigmaSchedule generations must be >= 1, got {self.generations}"
        )
        require(
            self.decay in tuple(Decay),
            f"SigmaSchedule decay must be one of {[d.value for d in Decay]}, got {self.decay!r}",
        )
        object.__setattr__(self, "decay", Decay(self.decay))

    def __call__(self, generation: int) -> float:
        """Returns sigma for ``generation``."""
        progress = min(generation / self.generations, 1.0)
        if self.decay is Decay.LINEAR:
            return self.initial + (self.final - self.initial) * progress
        return self.initial * (self.final / self.initial) ** progress


@dataclass(frozen=True)
class GAParams(RandomSearchParams):
    """GA hyperparameters; defaults follow Such et al. 2017 (Atari).

    Attributes:
        truncation: T, how many of the best individuals are parents.
        mutation_power: Sigma of the Gaussian mutation, constant or a :class:`SigmaSchedule`.
        (The selection and validation fields are those of
        :class:`~neuroevo.algorithms.random_search.RandomSearchParams`.)
    """

    truncation: int = 20
    mutation_power: float | SigmaSchedule = 0.002

    def __post_init__(self) -> None:
        super().__post_init__()
        n, t = self.population_size, self.truncation
        require(
            1 <= t <= n,
            f"truncation must be in [1, population_size={n}], got {t}; lower truncation or "
            f"raise population_size",
        )
        if not isinstance(self.mutation_power, SigmaSchedule):
            sigma = self.mutation_power
            require(
                math.isfinite(sigma) and sigma > 0,
                f"mutation_power must be a finite number > 0, got {sigma}",
            )


class GA(RandomSearch):
    """The Such et al. 2017 GA; see the module docstring.

    ``GA(num_params, scales, noise, seed, params=GAParams(...))``; the interface is
    :class:`~neuroevo.algorithms.base.Optimizer`.
    """

    name = "ga"
    params_class = GAParams
    _params: GAParams

    def _mutation_power(self, generation: int) -> float:
        power = self._params.mutation_power
        return power(generation) if isinstance(power, SigmaSchedule) else float(power)

    def _offspring(
        self, generation: int, population: tuple[GAGenome, ...], fitness: np.ndarray
    ) -> tuple[GAGenome, ...]:
        """Returns N - 1 children of parents drawn uniformly from the top T."""
        count = self._params.population_size - 1
        parents = np.argsort(-fitness, kind="stable")[: self._params.truncation]
        chosen = self._rng(generation, Stream.SELECTION).integers(0, parents.size, size=count)
        mutation_rng = self._rng(generation, Stream.MUTATION)
        noise_indices = self._noise.sample_indices(mutation_rng, self._num_params, count)
        sigma = self._mutation_power(generation)
        return tuple(
            population[parents[c]].child(i, sigma)
            for c, i in zip(chosen.tolist(), noise_indices.tolist(), strict=True)
        )
