"""Evaluation of genomes: the request type, the pipelined local evaluator and the Ray backend.

``EvalRequest`` (:mod:`neuroevo.evaluation.request`) is what an optimizer asks to evaluate;
``Evaluator`` owns K worker threads, each driving a contiguous range of env/network slots, and
a queue of pending ``(genome, episode)`` items; a slot whose episode ends is refilled at once.
It sees only the batched-env and population-model protocols, so it runs Atari, MuJoCo or a
test double unchanged. ``BaseEvaluator`` is the ``evaluate`` contract it shares with the Ray
backend (``RayEvaluator``).

Names are imported on first use (module ``__getattr__``): importing the request type, as the
algorithms do, imports no TensorFlow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_HOMES = {
    "EvalRequest": "request",
    "Phase": "request",
    "BaseEvaluator": "base",
    "EvaluationError": "base",
    "Evaluator": "evaluator",
    "default_device": "evaluator",
    "default_workers": "evaluator",
    "inter_op_threads": "evaluator",
    "split_slots": "evaluator",
    "TIME_KINDS": "results",
    "EvalProgress": "results",
    "EvalResults": "results",
    "EvalStats": "results",
    "WorkerStats": "results",
}

__all__ = [
    "TIME_KINDS",
    "BaseEvaluator",
    "EvalProgress",
    "EvalRequest",
    "EvalResults",
    "EvalStats",
    "EvaluationError",
    "Evaluator",
    "Phase",
    "WorkerStats",
    "default_device",
    "default_workers",
    "inter_op_threads",
    "split_slots",
]

if TYPE_CHECKING:
    from neuroevo.evaluation.base import BaseEvaluator, EvaluationError
    from neuroevo.evaluation.evaluator import (
        Evaluator,
        default_device,
        default_workers,
        inter_op_threads,
        split_slots,
    )
    from neuroevo.evaluation.request import EvalRequest, Phase
    from neuroevo.evaluation.results import (
        TIME_KINDS,
        EvalProgress,
        EvalResults,
        EvalStats,
        WorkerStats,
    )


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
