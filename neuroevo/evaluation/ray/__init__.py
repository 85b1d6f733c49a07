"""Evaluation on a Ray cluster, behind the local ``Evaluator``'s ``evaluate`` contract.

One module per job: ``driver`` (``RayEvaluator``: actors, chunk scheduling, failures),
``actor`` (the body of one actor: a local evaluator over the parts its factory builds),
``wire`` (what a chunk sends and returns) and ``stats`` (what the backend reports). Ray itself
is imported lazily: the single-machine path never needs it.
"""

from neuroevo.evaluation.ray.actor import EvaluatorParts
from neuroevo.evaluation.ray.driver import ClusterConnectionError, RayEvaluator
from neuroevo.evaluation.ray.stats import ClusterEvalStats, ClusterProgress, NodeStats

__all__ = [
    "ClusterConnectionError",
    "ClusterEvalStats",
    "ClusterProgress",
    "EvaluatorParts",
    "NodeStats",
    "RayEvaluator",
]
