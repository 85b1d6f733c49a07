"""Traced graph functions shared by every evaluator of one env and model in a process.

An evaluator's graph functions (``StepFunctions``, the in-graph rollout's ``RolloutGraph``)
capture the env's and model's resources, so they can serve any evaluator of the same env, model,
device, behaviour and noise table. Tracing them and instantiating the rollout loop costs 1-2 s
on a CPU, which a new ``Evaluator`` paid on its first call; kept here, only the first evaluator
of an env and model in a process pays it.

The entries live on the model (``model.__dict__``), so they go with it; each keeps its env and
noise table alive, so a model keeps its ``MAX_ENTRIES`` most recent ones. Evaluators sharing an
entry share its ``busy`` lock: two of them never run at once on the same env slots and loop
state.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from neuroevo.envs.base import BatchedEnv
from neuroevo.evaluation.behavior_params import BehaviorParams
from neuroevo.evaluation.step_functions import StepFunctions
from neuroevo.models.base import PopulationModel

MAX_ENTRIES = 2
_ATTRIBUTE = "_neuroevo_traced"
_LOCK = threading.Lock()


class Traced:
    """One env-and-model's graph functions: ``fns`` now, ``graph`` (the rollout) on first use,
    and the lock an evaluation holds."""

    def __init__(self, fns: StepFunctions, noise: Any):
        self.fns = fns
        self.noise = noise  # kept alive: the key holds its id
        self.graph: Any = None
        self.busy = threading.Lock()


def traced_functions(
    env: BatchedEnv,
    model: PopulationModel,
    device: str,
    behavior: BehaviorParams | None,
    noise: Any,
) -> Traced:
    """The shared entry of ``(env, model, device, behavior, noise)``, built on first use."""
    try:
        key = (id(env), device, behavior, id(noise))
        hash(key)
    except TypeError:  # an unhashable behaviour: nothing to share
        return Traced(StepFunctions(env, model, model_device=device, behavior=behavior), noise)
    with _LOCK:
        entries: OrderedDict = model.__dict__.setdefault(_ATTRIBUTE, OrderedDict())
        entry = entries.get(key)
        if entry is not None and entry.fns.env is env:
            entries.move_to_end(key)
            return entry
        entry = Traced(StepFunctions(env, model, model_device=device, behavior=behavior), noise)
        entries[key] = entry
        while len(entries) > MAX_ENTRIES:
            entries.popitem(last=False)
        return entry


def forget(model: PopulationModel, entry: Traced) -> None:
    """Drops ``entry`` from the model's cache (its loop state can no longer be trusted)."""
    with _LOCK:
        entries = model.__dict__.get(_ATTRIBUTE, {})
        for key in [k for k, v in entries.items() if v is entry]:
            del entries[key]
