"""GA-NS: the Such et al. 2017 GA with novelty as its fitness ("Deep Neuroevolution", Sec. 4.3).

The GA of :mod:`neuroevo.algorithms.ga` selects its parents by novelty instead of reward: each
new individual's novelty is the mean distance of its behaviour characterisation (BC) to the k
nearest among the archive and the other individuals of its generation (Lehman & Stanley
2011). After each generation every new individual's BC joins the archive with probability
``archive_probability`` (0.01 in the paper). The carried-over elite is the most novel
individual; there is no validation phase, since re-evaluating for reward would mix the two
signals (``validation_candidates`` must be 0).

Reward is still recorded: :attr:`GANS.elite` is the individual with the best population
return so far, which is what the run's ``best.npz`` and summaries report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuroevo.algorithms.base import GenerationSummary, PhaseResult, Stream, prefixed, unprefixed
from neuroevo.algorithms.ga import GA, GAParams
from neuroevo.algorithms.novelty import DEFAULT_K, NoveltyArchive
from neuroevo.algorithms.random_search import SearchState
from neuroevo.genome import GAGenome, pack_genomes, unpack_genomes
from neuroevo.params import check

__all__ = ["GANS", "GANSParams"]


@dataclass(frozen=True)
class GANSParams(GAParams):
    """GA-NS hyperparameters (``algorithm.ga_ns``): the GA's, plus the archive's.

    Attributes:
        k: Nearest neighbours in the novelty score.
        archive_probability: Chance that a new individual's BC joins the archive.
        validation_candidates: Must be 0 (the elite is the most novel individual).
    """

    k: int = DEFAULT_K
    archive_probability: float = 0.01
    validation_candidates: int = 0

    def _validate(self) -> None:
        super()._validate()
        check(self.k >= 1, "k", self.k, ">= 1")
        p = self.archive_probability
        check(0 <= p <= 1, "archive_probability", p, "in [0, 1]")
        check(
            self.validation_candidates == 0,
            "validation_candidates",
            self.validation_candidates,
            "0 for ga_ns (it selects by novelty; use algorithm ga to validate rewards)",
        )


class GANS(GA):
    """GA-NS (Such et al. 2017); see the module docstring. Needs per-episode behaviours."""

    name = "ga_ns"
    params_class = GANSParams
    needs_behavior = True
    _params: GANSParams

    def _init_state(self) -> SearchState:
        self._archive = NoveltyArchive(self._params.k)
        self._best: tuple[GAGenome, float] | None = None
        return super()._init_state()

    @property
    def archive(self) -> NoveltyArchive:
        """The novelty archive (read it, do not add to it)."""
        return self._archive

    @property
    def elite(self) -> GAGenome | None:
        """The individual with the best population return so far (None before one)."""
        return None if self._best is None else self._best[0]

    @property
    def elite_score(self) -> float | None:
        """Its population return."""
        return None if self._best is None else self._best[1]

    def _tell(
        self, state: SearchState, result: PhaseResult
    ) -> tuple[SearchState, GenerationSummary | None]:
        assert result.behavior is not None
        novelty = self._archive.novelty(result.behavior, with_population=True)
        next_state, summary = super()._tell(state, dataclasses.replace(result, fitness=novelty))
        assert summary is not None  # no validation phase: one tell per generation
        rng = self._rng(state.generation, Stream.ARCHIVE_INSERTION)
        chosen = rng.random(len(novelty)) < self._params.archive_probability
        self._archive.add(result.behavior[chosen], state.generation)
        best = int(np.argmax(result.fitness))
        if self._best is None or result.fitness[best] > self._best[1]:
            self._best = (state.population[best], float(result.fitness[best]))
        extras = {
            "novelty_mean": float(novelty.mean()),
            "novelty_max": float(novelty.max()),
            "archive_size": float(len(self._archive)),
        }
        return next_state, dataclasses.replace(
            summary, elite_score=self.elite_score, extras={**summary.extras, **extras}
        )

    def _state_to_dict(self, state: SearchState) -> dict[str, Any]:
        best = () if self._best is None else (self._best[0],)
        return (
            super()._state_to_dict(state)
            | prefixed("archive", self._archive.state_dict())
            | prefixed("reward_elite", pack_genomes(best))
            | {"reward_elite_score": None if self._best is None else self._best[1]}
        )

    def _state_from_dict(self, data: Mapping[str, Any], progress: dict[str, Any]) -> SearchState:
        state = super()._state_from_dict(data, progress)
        self._archive = NoveltyArchive(self._params.k)
        self._archive.load_state_dict(unprefixed("archive", data))
        best = unpack_genomes(unprefixed("reward_elite", data))
        self._best = (best[0], float(data["reward_elite_score"])) if best else None
        return state
