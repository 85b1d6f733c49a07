"""What ``Optimizer.tell`` accepts: the pending request, and results of its shape.

Each check raises ``ValueError`` (``TypeError`` for a mix of ``EvalResults`` and arrays)
naming what is wrong, before the optimizer's state is touched.
"""

from __future__ import annotations

import numpy as np

from neuroevo.evaluation.request import EvalRequest
from neuroevo.evaluation.results import EvalResults

__all__ = ["check_pending", "genome_behaviors", "genome_means", "unpack_results"]


def unpack_results(
    returns: EvalResults | np.ndarray,
    sign_returns: np.ndarray | None,
    behaviors: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """``(returns, training returns, sign returns, behaviours)`` from the evaluator's
    ``EvalResults`` or from a plain fitness loop's arrays (no training returns then)."""
    if not isinstance(returns, EvalResults):
        return returns, None, sign_returns, behaviors
    if sign_returns is not None or behaviors is not None:
        raise TypeError(
            "tell(request, results) takes sign returns and behaviours from the "
            "EvalResults; pass sign_returns= and behaviors= only with a returns array"
        )
    return returns.returns, returns.training_returns, returns.sign_returns, returns.behavior


def check_pending(request: EvalRequest, pending: EvalRequest) -> None:
    """Refuses results of a request other than the pending one."""
    if request is not pending and (
        request.generation,
        request.phase,
        request.genomes,
    ) != (pending.generation, pending.phase, pending.genomes):
        raise ValueError(
            f"tell() got the request of generation {request.generation} phase "
            f"{request.phase.value}, but generation {pending.generation} phase "
            f"{pending.phase.value} is pending; pass the request returned by the last ask()"
        )


def genome_means(values: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    """float64 [n]: the per-genome mean of ``values [n, episodes]`` (NaN stays NaN)."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape != shape:
        raise ValueError(f"{name} must have shape {shape} (genomes, episodes), got {values.shape}")
    with np.errstate(invalid="ignore"):
        return values.mean(axis=1)


def genome_behaviors(
    algorithm: str, behaviors: np.ndarray | None, shape: tuple[int, int]
) -> np.ndarray:
    """float64 [n, d]: each genome's episode BCs, flattened and averaged."""
    if behaviors is None:
        raise ValueError(
            f"{algorithm} needs the behaviour of every episode: call tell(request, results) "
            "with the evaluator's EvalResults (an env without behavior() cannot be used "
            "with novelty search)"
        )
    behaviors = np.asarray(behaviors)
    if behaviors.shape[:2] != shape or behaviors.ndim < 3:
        raise ValueError(
            f"behaviors must have shape {shape} + (bc dims...) (genomes, episodes, BC), got "
            f"{behaviors.shape}"
        )
    flat = behaviors.reshape(*shape, -1).astype(np.float64)
    if not np.all(np.isfinite(flat)):
        raise ValueError("behaviors hold NaN or inf; a behaviour characterisation is finite")
    return flat.mean(axis=1)
