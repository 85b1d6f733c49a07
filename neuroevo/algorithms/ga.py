"""Genetic algorithm of Such et al. 2017, "Deep Neuroevolution: Genetic Algorithms Are a
Competitive Alternative for Training Deep Neural Networks for Reinforcement Learning".

A simple GA (Algorithm 1 of the paper): no crossover, truncation selection, Gaussian
mutation, one elite. Each generation carries the elite over unchanged and creates N - 1
children of parents drawn uniformly from the top T of the previous generation, which are the
elite plus the best T - 1 other individuals; a child is its parent's seed chain plus one
``(noise_index, sigma)``, so it costs one multiply-add to materialise from a cached parent.
The elite is chosen by re-evaluating candidates on extra episodes (the phases, and the switch
to Uber's released variant, are described in :mod:`neuroevo.algorithms.random_search`, which
this class extends).

Paper defaults (Atari): N = 1000, T = 20, sigma = 0.002, 10 candidates (the top 9 plus the
elite) x 30 episodes.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from neuroevo.algorithms.base import Stream
from neuroevo.algorithms.random_search import RandomSearch, RandomSearchParams
from neuroevo.core.params import Params, check
from neuroevo.genomes.genome import GAGenome

__all__ = ["GA", "Decay", "GAParams", "MutationSchedule"]


class Decay(str, enum.Enum):
    """How the mutation power moves from its initial to its final value."""

    CONSTANT = "constant"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


@dataclass(frozen=True)
class MutationSchedule(Params):
    """How the mutation power changes over generations (``algorithm.ga.mutation_schedule``).

    ``linear`` moves it in equal steps, ``exponential`` by a constant factor per generation
    (``(final_power / mutation_power) ** (1 / generations)``), from ``mutation_power`` at
    generation 0 to ``final_power`` at ``generations``, and holds it there afterwards.
    ``constant`` (the papers' setting) ignores both fields.

    Attributes:
        decay: constant, linear or exponential.
        final_power: Sigma from generation ``generations`` on.
        generations: Length of the decay.
    """

    renamed: ClassVar[Mapping[str, str]] = {"kind": "decay"}

    decay: Decay = Decay.CONSTANT
    final_power: float = 0.0002
    generations: int = 1000

    def _validate(self) -> None:
        check(self.final_power > 0, "final_power", self.final_power, "> 0")
        check(self.generations >= 1, "generations", self.generations, ">= 1")

    def power(self, initial: float, generation: int) -> float:
        """Returns sigma for ``generation``, starting from ``initial`` at generation 0."""
        if self.decay is Decay.CONSTANT:
            return initial
        progress = min(generation / self.generations, 1.0)
        if self.decay is Decay.LINEAR:
            return initial + (self.final_power - initial) * progress
        return initial * (self.final_power / initial) ** progress


@dataclass(frozen=True)
class GAParams(RandomSearchParams):
    """GA hyperparameters; defaults follow Such et al. 2017 (Atari).

    This is the ``algorithm.ga`` section of the training config.

    Attributes:
        truncation: T, how many of the best individuals are parents.
        mutation_power: Sigma of the Gaussian mutation (at generation 0 when scheduled).
        mutation_schedule: How sigma changes over generations (constant by default).
        (The selection and validation fields are those of
        :class:`~neuroevo.algorithms.random_search.RandomSearchParams`.)
    """

    truncation: int = 20
    mutation_power: float = 0.002
    mutation_schedule: MutationSchedule = field(default_factory=MutationSchedule)

    def _validate(self) -> None:
        # Population first, then truncation, then validation: the first error is the root one.
        self._validate_population()
        n, t = self.population_size, self.truncation
        check(t >= 1, "truncation", t, ">= 1")
        check(t <= n, "truncation", t, f"<= population_size ({n})")
        self._validate_validation()
        check(self.mutation_power > 0, "mutation_power", self.mutation_power, "> 0")


class GA(RandomSearch):
    """The Such et al. 2017 GA; see the module docstring.

    ``GA(num_params, scales, noise, seed, params=GAParams(...))``; the interface is
    :class:`~neuroevo.algorithms.base.Optimizer`.
    """

    name = "ga"
    params_class = GAParams
    _params: GAParams

    def _mutation_power(self, generation: int) -> float:
        params = self._params
        return params.mutation_schedule.power(params.mutation_power, generation)

    def _offspring(self, generation: int, parents: tuple[GAGenome, ...]) -> tuple[GAGenome, ...]:
        """Returns the new individuals: children of parents drawn uniformly from the top T
        (``parents`` starts with the elite, so it is always one of them)."""
        count = self._params.new_individuals
        top = parents[: self._params.truncation]
        chosen = self._rng(generation, Stream.SELECTION).integers(0, len(top), size=count)
        mutation_rng = self._rng(generation, Stream.MUTATION)
        noise_indices = self._noise.sample_indices(mutation_rng, self._num_params, count)
        sigma = self._mutation_power(generation)
        return tuple(
            top[c].child(i, sigma)
            for c, i in zip(chosen.tolist(), noise_indices.tolist(), strict=True)
        )
