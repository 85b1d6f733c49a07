"""Synchronous PBT never strands paused trials: when the trials still waiting at a perturbation
point are all that is left (the others ended their budgets short of it), Tune's own scheduler
runs none of them again; ours runs the one furthest behind. And a trial's last report ends it.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("ray.tune")

from ray.tune.experiment import Trial
from ray.tune.schedulers import PopulationBasedTraining, TrialScheduler

from neuroevo.sweeps.pbt import SynchronousPBT

SYNC = 150_000.0
"""The next perturbation point, in env steps."""


@dataclasses.dataclass(eq=False)
class FakeTrial:
    name: str
    status: str
    last_result: dict[str, Any]


def controller(scheduler: PopulationBasedTraining, *trials: FakeTrial) -> SimpleNamespace:
    """Tune's view of the trials, as the scheduler reads it."""
    scheduler._trial_state = {
        t: SimpleNamespace(last_train_time=t.last_result["frames"]) for t in trials
    }
    scheduler._next_perturbation_sync = SYNC
    return SimpleNamespace(get_trials=lambda: list(trials))


def schedulers() -> list[PopulationBasedTraining]:
    options = {"time_attr": "frames", "perturbation_interval": 30_000, "metric": "m"}
    options |= {"mode": "max", "hyperparam_mutations": {"x": [1, 2]}}
    return [PopulationBasedTraining(synch=True, **options), SynchronousPBT(**options)]


def test_the_paused_trial_furthest_behind_runs_when_nothing_else_can() -> None:
    # As in a Hopper sweep: two trials paused past the point, the two others ended short of
    # the next one.
    trials = [
        FakeTrial("a", Trial.TERMINATED, {"frames": 161_206}),
        FakeTrial("b", Trial.PAUSED, {"frames": 185_767}),
        FakeTrial("c", Trial.PAUSED, {"frames": 155_074}),
        FakeTrial("d", Trial.TERMINATED, {"frames": 172_619}),
    ]
    tunes, ours = schedulers()
    assert tunes.choose_trial_to_run(controller(tunes, *trials)) is None  # the deadlock
    assert ours.choose_trial_to_run(controller(ours, *trials)) is trials[2]


def test_paused_trials_wait_while_a_trial_runs_and_tunes_rule_comes_first() -> None:
    running = FakeTrial("a", Trial.RUNNING, {"frames": 120_000})
    waiting = FakeTrial("b", Trial.PAUSED, {"frames": 155_074})
    for scheduler in schedulers():
        assert scheduler.choose_trial_to_run(controller(scheduler, running, waiting)) is None
    behind = FakeTrial("c", Trial.PAUSED, {"frames": 140_000})
    for scheduler in schedulers():
        chosen = scheduler.choose_trial_to_run(controller(scheduler, running, waiting, behind))
        assert chosen is behind


@pytest.mark.parametrize("spent", [False, True])
def test_a_trial_with_no_budget_left_ends_instead_of_pausing(monkeypatch, spent: bool) -> None:
    # Whatever Tune's scheduler decides at a trial's last report, pausing it would only have
    # it report again, resumed, and pause again.
    monkeypatch.setattr(PopulationBasedTraining, "on_trial_result", lambda *_: TrialScheduler.PAUSE)
    _, ours = schedulers()
    decision = ours.on_trial_result(None, None, {"frames": 1.0, "budget_spent": spent})
    assert decision == (TrialScheduler.CONTINUE if spent else TrialScheduler.PAUSE)
