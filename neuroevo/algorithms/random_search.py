"""Random search with elite validation, and the population machinery the GA builds on.

Random search (Such et al. 2017, Section 4) samples a fresh random network for every
individual of every generation; only the elite carries over. Such et al. use it as the
baseline that shows how much of the GA's result comes from search rather than from luck.

One generation follows Algorithm 1 of Such et al. 2017, the same in
:class:`~neuroevo.algorithms.ga.GA`:

1. Phase "population": the generation's new individuals (N - 1 of them: the population of N
   is the elite plus N - 1 new ones; fresh random genomes here, mutated parents in the GA)
   each play ``population_episodes`` episodes. The elite is carried over unchanged and is not
   re-evaluated in this phase.
2. Phase "validation": ``validation_candidates`` (V) candidates play ``validation_episodes``
   more episodes each: in generation 0 the top V new individuals, later the previous elite
   plus the top V - 1 (the paper's "top 9 plus the elite", V = 10). Every candidate gets its
   own episode seeds, independent of the population phase and of the other candidates. The
   best mean becomes the elite (ties go to the earlier candidate, so the previous elite keeps
   its place). With ``V == 0`` the phase is skipped and the elite is the best new individual
   by population fitness (noisier on stochastic tasks; the papers always validate).

The GA's parents for the next generation are the elite plus the top T - 1 new individuals, so
the elite is always a parent. ``elite_in_population: false`` follows the released code of
Uber's ``gpu_implementation/ga.py`` instead: N new individuals per generation, the elite kept
beside the population (in validation and among the parents, but not counted in N).

Genomes are :class:`~neuroevo.genomes.genome.GAGenome` seed chains (empty chains here).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from neuroevo.algorithms.base import (
    GenerationSummary,
    Optimizer,
    PhaseResult,
    PopulationParams,
    Stream,
)
from neuroevo.core.params import check
from neuroevo.evaluation.request import EvalRequest, Phase
from neuroevo.genomes.genome import GAGenome

__all__ = ["RandomSearch", "RandomSearchParams", "SearchState"]


@dataclass(frozen=True)
class RandomSearchParams(PopulationParams):
    """Random-search hyperparameters; defaults follow Such et al. 2017 (Atari).

    This is the ``algorithm.random_search`` section of the training config.

    Attributes:
        population_size: N, individuals per generation. With ``elite_in_population`` (the
            paper) N counts the elite, so N - 1 new individuals are evaluated; otherwise N new
            ones are (Uber's released code).
        population_episodes: Episodes per new individual in the population phase.
        validation_candidates: V, individuals re-evaluated to pick the elite: the top V in
            generation 0, then the previous elite plus the top V - 1. 0 skips validation (the
            elite is then the best new individual by population fitness).
        validation_episodes: Episodes per candidate in the validation phase.
        elite_in_population: Whether ``population_size`` counts the elite (Algorithm 1 of the
            paper) or not (``gpu_implementation/ga.py`` evaluates N new individuals).
    """

    validation_candidates: int = 10
    validation_episodes: int = 30
    elite_in_population: bool = True

    @property
    def new_individuals(self) -> int:
        """Individuals created and evaluated each generation (the elite not included)."""
        return self.population_size - 1 if self.elite_in_population else self.population_size

    def _validate(self) -> None:
        self._validate_population()
        self._validate_validation()

    def _validate_validation(self) -> None:
        new = self.new_individuals
        check(
            self.validation_candidates == 0 or 2 <= self.validation_candidates <= new,
            "validation_candidates",
            self.validation_candidates,
            f"0 (no validation) or between 2 and the {new} new individuals per generation "
            "(one candidate would always be the previous elite)",
        )
        validation = self.validation_episodes
        check(validation >= 1, "validation_episodes", validation, ">= 1")


@dataclass(frozen=True, eq=False)
class SearchState:
    """Everything that changes during a GA or random-search run.

    Attributes:
        generation: Current generation.
        phase: Phase whose results ``tell`` expects next.
        population: The generation's new individuals (the elite is kept in ``elite``).
        fitness: float64 [len(population)] population fitness after the NaN policy; empty
            before the population phase is told.
        candidates: Genomes of the validation phase (empty outside it).
        elite: Best genome so far as judged by validation, None in generation 0.
        elite_score: The elite's validation (or population) fitness.
        pending: Partial summary of the current generation, set between phases.
    """

    generation: int
    phase: Phase
    population: tuple[GAGenome, ...]
    fitness: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0))
    candidates: tuple[GAGenome, ...] = ()
    elite: GAGenome | None = None
    elite_score: float | None = None
    pending: GenerationSummary | None = None


class RandomSearch(Optimizer):
    """Random search with a validated elite (Such et al. 2017); see the module docstring."""

    name = "random_search"
    params_class = RandomSearchParams
    _params: RandomSearchParams
    _state: SearchState

    @property
    def elite(self) -> GAGenome | None:
        """The validated best genome, None until generation 0 is complete."""
        return self._state.elite

    @property
    def elite_score(self) -> float | None:
        """The elite's validation score (population score without validation)."""
        return self._state.elite_score

    def _offspring(self, generation: int, parents: tuple[GAGenome, ...]) -> tuple[GAGenome, ...]:
        """Returns the new individuals of ``generation``: here, fresh random ones.

        Args:
            generation: The generation being created.
            parents: The elite followed by the previous generation's new individuals, best
                first (the GA draws its parents from the head of this list).
        """
        return self._fresh(generation, self._params.new_individuals)

    def _fresh(self, generation: int, count: int) -> tuple[GAGenome, ...]:
        """Returns ``count`` random initial genomes (empty chains) for ``generation``."""
        rng = self._rng(generation, Stream.INIT)
        indices = self._noise.sample_indices(rng, self._num_params, count)
        return tuple(GAGenome(index) for index in indices.tolist())

    def _mutation_power(self, generation: int) -> float | None:
        """The sigma reported in the summary; random search mutates nothing."""
        return None

    def _init_state(self) -> SearchState:
        return SearchState(0, Phase.POPULATION, self._fresh(0, self._params.new_individuals))

    def _ask(self) -> EvalRequest:
        state, params = self._state, self._params
        if state.phase is Phase.POPULATION:
            return self._request_for(state.population, params.population_episodes, Phase.POPULATION)
        return self._request_for(state.candidates, params.validation_episodes, Phase.VALIDATION)

    def _tell(
        self, state: SearchState, result: PhaseResult
    ) -> tuple[SearchState, GenerationSummary | None]:
        if state.phase is Phase.VALIDATION:
            assert state.pending is not None
            extras = {**state.pending.extras, "validation_mean": float(result.fitness.mean())}
            summary = result.added_to(state.pending, extras=extras)
            best = int(np.argmax(result.fitness))
            return self._finish(state, state.candidates[best], float(result.fitness[best]), summary)
        summary = result.summary(state.generation, self._mutation_power(state.generation))
        state = dataclasses.replace(state, fitness=result.fitness)
        ranked = [state.population[i] for i in np.argsort(-result.fitness, kind="stable")]
        count = self._params.validation_candidates
        if count == 0:
            return self._finish(state, ranked[0], float(result.fitness.max()), summary)
        candidates = ranked[:count] if state.elite is None else [state.elite, *ranked[: count - 1]]
        state = dataclasses.replace(
            state, phase=Phase.VALIDATION, candidates=tuple(candidates), pending=summary
        )
        return state, None

    def _finish(
        self, state: SearchState, elite: GAGenome, score: float, summary: GenerationSummary
    ) -> tuple[SearchState, GenerationSummary]:
        """Completes the generation: records the elite and builds the next population.

        The next parents are the elite followed by this generation's new individuals, best
        first, without the elite (Algorithm 1: ``P <- [Elite, P - {Elite}]``).
        """
        generation = state.generation + 1
        order = np.argsort(-state.fitness, kind="stable")
        ranked = tuple(state.population[i] for i in order if state.population[i] != elite)
        offspring = self._offspring(generation, (elite, *ranked))
        next_state = dataclasses.replace(
            state,
            generation=generation,
            phase=Phase.POPULATION,
            population=offspring,
            fitness=np.empty(0),
            candidates=(),
            elite=elite,
            elite_score=score,
            pending=None,
        )
        return next_state, dataclasses.replace(summary, elite_score=score)
