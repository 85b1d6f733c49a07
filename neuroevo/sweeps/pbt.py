"""Tune's synchronous population-based training, without its deadlocks.

Synchronous PBT pauses each trial at a perturbation point until every live trial has reached
it. Two things then stop a sweep for good in Tune's own scheduler:

- a trial whose budget ends before the next point (trials count env steps at different rates,
  and an exploit moves a trial's counter to its source's) never reaches it, and once every
  other trial has paused, nothing runs again. Here, when no trial runs and Tune's rule lets no
  paused trial run, the paused trial furthest behind runs on;
- a trial paused at its last report (its budget spent) would, resumed, only report again and
  be paused again. Here a trial's last report never pauses it: it ends.
"""

from __future__ import annotations

from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import PopulationBasedTraining, TrialScheduler

__all__ = ["SynchronousPBT"]


class SynchronousPBT(PopulationBasedTraining):
    """``PopulationBasedTraining(synch=True)`` that always lets a waiting trial run when
    nothing else can, and lets a trial with no budget left end."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(synch=True, **kwargs)

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        decision = super().on_trial_result(tune_controller, trial, result)
        if decision == TrialScheduler.PAUSE and result.get("budget_spent"):
            return TrialScheduler.CONTINUE  # the trial ends after this report
        return decision

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        chosen = super().choose_trial_to_run(tune_controller)
        if chosen is not None:
            return chosen
        trials = tune_controller.get_trials()
        if any(trial.status == Trial.RUNNING for trial in trials):
            return None  # a running trial may still reach the perturbation point
        paused = [trial for trial in trials if trial.status == Trial.PAUSED]
        return min(paused, key=self._time_of, default=None)

    def _time_of(self, trial: Trial) -> float:
        return float((trial.last_result or {}).get(self._time_attr, 0.0))
