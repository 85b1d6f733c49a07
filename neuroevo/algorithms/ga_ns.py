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
from dataclasses import dataclass

import numpy as np

from neuroevo.algorithms.base import GenerationSummary, PhaseResult, Stream
from neuroevo.algorithms.ga import GA, GAParams
from neuroevo.algorithms.novelty import DEFAULT_K, NoveltyArchive
from neuroevo.algorithms.random_search import SearchState
from neuroevo.core.params import check
from neuroevo.genomes.genome import GAGenome

__all__ = ["GANS", "GANSParams"]


@dataclass(frozen=True)
class GANSParams(GAParams):
    """GA-NS hyperparameters (``algorithm.ga_ns``): the GA's, plus the archive's.

    Attributes:
        k: Nearest neighbours in the novelty score.
        archive_probability: Chance that a new individual's BC joins the archive.
        validation_candidates: Must be 0 (the elite is the most novel individual).
    """

    needs_behavior = True

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


@dataclass(frozen=True, eq=False)
class GANSState(SearchState):
    """The GA's state plus the novelty archive and the best individual by reward.

    Attributes:
        archive: The novelty archive (its rows are part of the checkpoint).
        reward_elite: The individual with the best population return so far, None before one.
        reward_elite_score: Its population return.
    """

    archive: NoveltyArchive = dataclasses.field(default_factory=NoveltyArchive)
    reward_elite: GAGenome | None = None
    reward_elite_score: float | None = None


class GANS(GA):
    """GA-NS (Such et al. 2017); see the module docstring. Needs per-episode behaviours."""

    name = "ga_ns"
    params_class = GANSParams
    _params: GANSParams

    def _init_state(self) -> GANSState:
        search = super()._init_state()
        fields = {f.name: getattr(search, f.name) for f in dataclasses.fields(search)}
        return GANSState(**fields, archive=NoveltyArchive(self._params.k))

    @property
    def archive(self) -> NoveltyArchive:
        """The novelty archive (read it, do not add to it)."""
        return self._state.archive

    @property
    def elite(self) -> GAGenome | None:
        """The individual with the best population return so far (None before one)."""
        return self._state.reward_elite

    @property
    def elite_score(self) -> float | None:
        """Its population return."""
        return self._state.reward_elite_score

    def _tell(
        self, state: SearchState, result: PhaseResult
    ) -> tuple[SearchState, GenerationSummary | None]:
        assert isinstance(state, GANSState) and result.behavior is not None
        archive = state.archive
        novelty = archive.novelty(result.behavior, with_population=True)
        next_state, summary = super()._tell(state, dataclasses.replace(result, fitness=novelty))
        assert summary is not None  # no validation phase: one tell per generation
        rng = self._rng(state.generation, Stream.ARCHIVE_INSERTION)
        chosen = rng.random(len(novelty)) < self._params.archive_probability
        archive.add(result.behavior[chosen], state.generation)
        best = int(np.argmax(result.fitness))
        score = state.reward_elite_score
        if score is None or result.fitness[best] > score:
            next_state = dataclasses.replace(
                next_state,
                reward_elite=state.population[best],
                reward_elite_score=float(result.fitness[best]),
            )
        extras = {
            "novelty_mean": float(novelty.mean()),
            "novelty_max": float(novelty.max()),
            "archive_size": float(len(archive)),
        }
        return next_state, dataclasses.replace(
            summary,
            elite_score=next_state.reward_elite_score,
            extras={**summary.extras, **extras},
        )
