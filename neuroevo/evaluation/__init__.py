"""Pipelined evaluation of genomes on a batched env with a population model.

``Evaluator`` owns K worker threads, each driving a contiguous range of env/network slots, and
a queue of pending ``(genome, episode)`` items; a slot whose episode ends is refilled at once.
It sees only the batched-env and population-model protocols, so it runs Atari, MuJoCo or a
test double unchanged. ``BaseEvaluator`` is the ``evaluate`` contract it shares with the Ray
backend (``distributed.RayEvaluator``).
"""

from neuroevo.evaluation.base import BaseEvaluator, EvalRequest, EvaluationError
from neuroevo.evaluation.evaluator import (
    Evaluator,
    default_device,
    default_workers,
    inter_op_threads,
    split_slots,
)
from neuroevo.evaluation.results import (
    TIME_KINDS,
    EvalProgress,
    EvalResults,
    EvalStats,
    WorkerStats,
)

__all__ = [
    "TIME_KINDS",
    "BaseEvaluator",
    "EvalProgress",
    "EvalRequest",
    "EvalResults",
    "EvalStats",
    "EvaluationError",
    "Evaluator",
    "WorkerStats",
    "default_device",
    "default_workers",
    "inter_op_threads",
    "split_slots",
]
