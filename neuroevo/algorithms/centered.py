"""What every strategy whose answer is the centre of its search distribution shares (OpenAI ES,
the novelty ES family through ES, and the Gaussian strategies): the centre is the elite,
scored by the centre phase that ends each generation, and readable as a vector."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuroevo.algorithms.base import GenerationSummary
from neuroevo.evaluation.request import Phase
from neuroevo.genomes.genome import ESGenome


@dataclass(frozen=True, eq=False, kw_only=True)
class CenteredState:
    """What the State of every such strategy holds; strategies add their own fields.

    Attributes:
        generation: Updates made so far.
        phase: Phase whose results ``tell`` expects next.
        center_id: Decoder id of the centre (genomes refer to it).
        center: [P], the current centre.
        center_score: Mean return of the centre when last evaluated, else None.
        pending: Summary of the current generation while the centre phase is pending.
    """

    generation: int
    phase: Phase
    center_id: int
    center: np.ndarray
    center_score: float | None = None
    pending: GenerationSummary | None = None


class CenterIsElite:
    """Mixin for an ``Optimizer`` whose ``State`` is a :class:`CenteredState`; list it before
    ``Optimizer`` among the bases; its Params have ``center_episodes``."""

    _state: CenteredState
    _params: Any
    _request_for: Any

    @property
    def elite(self) -> ESGenome:
        """The current centre as a genome (the strategy's answer at every point of the run)."""
        return ESGenome(self._state.center_id, 0, 0, 0.0)

    @property
    def elite_score(self) -> float | None:
        """The centre's last evaluated mean return, or None."""
        return self._state.center_score

    @property
    def center(self) -> np.ndarray:
        """[P], read-only view of the current centre."""
        view = self._state.center.view()
        view.flags.writeable = False
        return view

    def _center_request(self) -> Any:
        """The centre phase's request: the centre, for ``center_episodes`` episodes."""
        return self._request_for((self.elite,), self._params.center_episodes, Phase.CENTER)

    def _population_scored(self, next_state: Any, summary: Any) -> tuple[Any, Any]:
        """The state and summary after the population phase, given the updated state (same
        generation) and the generation's summary: the new centre is unevaluated until its
        phase, so with ``center_episodes > 0`` the summary waits for it."""
        if self._params.center_episodes > 0:
            pending = dataclasses.replace(
                next_state, phase=Phase.CENTER, center_score=None, pending=summary
            )
            return pending, None
        return dataclasses.replace(next_state, generation=next_state.generation + 1), summary

    def _center_scored(self, state: Any, result: Any) -> tuple[Any, Any]:
        """The state and summary after the centre phase (``result``, a ``PhaseResult`` of one
        genome): the generation ends with the centre's score as the elite's."""
        assert state.pending is not None
        score = float(result.raw[0])
        summary = result.added_to(state.pending, elite_score=score)
        next_state = dataclasses.replace(
            state,
            generation=state.generation + 1,
            phase=Phase.POPULATION,
            center_score=score,
            pending=None,
        )
        return next_state, summary
