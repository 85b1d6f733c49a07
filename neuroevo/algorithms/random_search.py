"""Random search with elite validation, and the population machinery the GA builds on.

Random search (Such et al. 2017, Section 4) samples a fresh random network for every
individual of every generation; only the elite carries over. Such et al. use it as the
baseline that shows how much of the GA's result comes from search rather than from luck.

One generation, the same in :class:`~neuroevo.algorithms.ga.GA`:

1. Phase "population": every individual plays ``population_episodes`` episodes (each with its
   own seeds). Generation 0 has N fresh genomes; later generations hold the elite plus N - 1
   offspring (fresh genomes here, mutated parents in the GA).
2. Phase "validation": the top ``validation_candidates`` by population fitness, plus the
   previous elite, each play ``validation_episodes`` more episodes on shared seeds; the best
   mean becomes the elite. With ``validation_candidates == 0`` this phase is skipped and the
   elite is the best by population fitness (noisier on stochastic tasks).

Genomes are :class:`~neuroevo.genome.GAGenome` seed chains (empty chains here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from neuroevo.algorithms.base import (
    EvalRequest,
    GenerationSummary,
    Optimizer,
    Phase,
    PhaseResult,
    Stream,
    prefixed,
    unprefixed,
)
from neuroevo.genome import GAGenome, pack_genomes, unpack_genomes
from neuroevo.params import Params, check

__all__ = ["RandomSearch", "RandomSearchParams", "SearchState"]


@dataclass(frozen=True)
class RandomSearchParams(Params):
    """Random-search hyperparameters; defaults follow Such et al. 2017 (Atari).

    This is the ``algorithm.random_search`` section of the training config.

    Attributes:
        population_size: N, individuals per generation (including the elite).
        population_episodes: Episodes per individual in the population phase.
        validation_candidates: Top individuals re-evaluated to pick the elite; 0 skips
            validation (the elite is then the best by population fitness).
        validation_episodes: Episodes per candidate in the validation phase.
    """

    renamed: ClassVar[Mapping[str, str]] = {
        "population": "population_size",
        "episodes_per_genome": "population_episodes",
    }

    population_size: int = 1000
    population_episodes: int = 1
    validation_candidates: int = 10
    validation_episodes: int = 30

    def _validate(self) -> None:
        n = self.population_size
        check(n >= 2, "population_size", n, ">= 2")
        episodes = self.population_episodes
        check(episodes >= 1, "population_episodes", episodes, ">= 1")
        check(
            0 <= self.validation_candidates <= n,
            "validation_candidates",
            self.validation_candidates,
            f"between 0 (no validation) and population_size ({n})",
        )
        validation = self.validation_episodes
        check(validation >= 1, "validation_episodes", validation, ">= 1")


@dataclass(frozen=True, eq=False)
class SearchState:
    """Everything that changes during a GA or random-search run.

    Attributes:
        generation: Current generation.
        phase: Phase whose results ``tell`` expects next.
        population: The generation's N genomes (elite first from generation 1 on).
        fitness: float64 [N] population fitness after the NaN policy; empty before the
            population phase is told.
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
    _state: SearchState

    @property
    def elite(self) -> GAGenome | None:
        """The validated best genome, None until generation 0 is complete."""
        return self._state.elite

    @property
    def elite_score(self) -> float | None:
        """The elite's validation score (population score without validation)."""
        return self._state.elite_score

    def _offspring(
        self, generation: int, population: tuple[GAGenome, ...], fitness: np.ndarray
    ) -> tuple[GAGenome, ...]:
        """Returns the N - 1 non-elite genomes of ``generation``: here, fresh random ones.

        Args:
            generation: The generation being created.
            population: The previous generation's N genomes.
            fitness: float64 [N], their population fitness (NaN policy applied).
        """
        return self._fresh(generation, self._params.population_size - 1)

    def _fresh(self, generation: int, count: int) -> tuple[GAGenome, ...]:
        """Returns ``count`` random initial genomes (empty chains) for ``generation``."""
        rng = self._rng(generation, Stream.INIT)
        indices = self._noise.sample_indices(rng, self._num_params, count)
        return tuple(GAGenome(index) for index in indices.tolist())

    def _mutation_power(self, generation: int) -> float | None:
        """The sigma reported in the summary; random search mutates nothing."""
        return None

    def _init_state(self) -> SearchState:
        return SearchState(0, Phase.POPULATION, self._fresh(0, self._params.population_size))

    def _ask(self) -> EvalRequest:
        state, params = self._state, self._params
        if state.phase is Phase.POPULATION:
            return self._request_for(state.population, params.population_episodes, Phase.POPULATION)
        candidates = state.candidates
        return self._request_for(
            candidates, params.validation_episodes, Phase.VALIDATION, repeat=len(candidates)
        )

    def _tell(
        self, state: SearchState, result: PhaseResult
    ) -> tuple[SearchState, GenerationSummary | None]:
        if state.phase is Phase.VALIDATION:
            assert state.pending is not None
            summary = result.added_to(state.pending)
            best = int(np.argmax(result.fitness))
            return self._finish(state, state.candidates[best], float(result.fitness[best]), summary)
        summary = result.summary(state.generation, self._mutation_power(state.generation))
        state = dataclasses.replace(state, fitness=result.fitness)
        order = np.argsort(-result.fitness, kind="stable")
        if self._params.validation_candidates == 0:
            top = int(order[0])
            return self._finish(state, state.population[top], float(result.fitness[top]), summary)
        candidates = [state.population[i] for i in order[: self._params.validation_candidates]]
        if state.elite is not None and state.elite not in candidates:
            candidates.append(state.elite)
        state = dataclasses.replace(
            state, phase=Phase.VALIDATION, candidates=tuple(candidates), pending=summary
        )
        return state, None

    def _finish(
        self, state: SearchState, elite: GAGenome, score: float, summary: GenerationSummary
    ) -> tuple[SearchState, GenerationSummary]:
        """Completes the generation: records the elite and builds the next population."""
        generation = state.generation + 1
        offspring = self._offspring(generation, state.population, state.fitness)
        next_state = SearchState(
            generation, Phase.POPULATION, (elite, *offspring), elite=elite, elite_score=score
        )
        return next_state, dataclasses.replace(summary, elite_score=score)

    def _state_to_dict(self, state: SearchState) -> dict[str, Any]:
        data: dict[str, Any] = {
            "generation": state.generation,
            "phase": state.phase.value,
            "fitness": state.fitness,
            "elite_score": state.elite_score,
        }
        data |= prefixed("population", pack_genomes(state.population))
        data |= prefixed("candidates", pack_genomes(state.candidates))
        data |= prefixed("elite", pack_genomes(() if state.elite is None else (state.elite,)))
        if state.pending is not None:
            data |= prefixed("pending", state.pending.as_dict())
        return data

    def _state_from_dict(self, data: Mapping[str, Any]) -> SearchState:
        elite = unpack_genomes(unprefixed("elite", data))
        pending = unprefixed("pending", data)
        score = data["elite_score"]
        return SearchState(
            generation=int(data["generation"]),
            phase=Phase(data["phase"]),
            population=unpack_genomes(unprefixed("population", data)),
            fitness=np.asarray(data["fitness"], dtype=np.float64),
            candidates=unpack_genomes(unprefixed("candidates", data)),
            elite=elite[0] if elite else None,
            elite_score=None if score is None else float(score),
            pending=GenerationSummary.from_dict(pending) if pending else None,
        )
