"""What every strategy whose answer is the centre of its search distribution shares (OpenAI ES,
the novelty ES family through ES, and the Gaussian strategies): the centre is the elite,
scored by the centre phase that ends each generation, and readable as a vector."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from neuroevo.evaluation.request import Phase
from neuroevo.genome import ESGenome


class CenterIsElite:
    """Mixin for an ``Optimizer`` whose ``State`` has ``center`` (the current centre, a [P]
    vector), ``center_id`` (its id in the decoder) and ``center_score``; list it before
    ``Optimizer`` among the bases."""

    _state: Any

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
