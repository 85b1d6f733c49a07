"""The contract every evaluation backend implements: ``evaluate`` an :class:`EvalRequest`.

``BaseEvaluator.evaluate`` holds the signature, the argument checks and the documentation
once; a backend (the pipelined local ``Evaluator``, the Ray cluster's ``RayEvaluator``)
implements ``_evaluate`` on an :class:`EvalCall` (the request plus the checked per-call
options), ``set_obs_stats`` and ``close``. Callers (the trainer, the paper test, the
optimizers' loops) see only this contract, so backends are interchangeable.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from neuroevo.evaluation.request import EvalRequest, check_action_noise_fits
from neuroevo.evaluation.results import EvalProgress, EvalResults

__all__ = ["BaseEvaluator", "EvalCall", "EvaluationError", "check_action_noise_fits"]

_Evaluator = TypeVar("_Evaluator", bound="BaseEvaluator")


class EvaluationError(RuntimeError):
    """An evaluation failed in a worker or on a cluster node. The message holds the failing
    code's traceback; ``__cause__`` is the original exception when it was raised locally."""


@dataclasses.dataclass(frozen=True)
class EvalCall:
    """One checked ``evaluate`` call as a backend runs it: the request and the caller's options.

    Attributes:
        request: what to evaluate.
        max_steps: agent-step cutoff per episode, or None.
        progress: progress callback, or None.
        progress_interval_s: seconds between progress calls.
    """

    request: EvalRequest
    max_steps: int | None
    progress: Callable[[EvalProgress], None] | None
    progress_interval_s: float

    @property
    def genomes(self) -> Sequence[Any]:
        return self.request.genomes

    @property
    def seeds(self) -> np.ndarray:
        """int64 ``[n, e]``."""
        return self.request.episode_seeds

    @property
    def episodes_per_genome(self) -> int:
        return self.request.episodes_per_genome

    @property
    def action_noise_std(self) -> float:
        return self.request.action_noise_std

    @property
    def sample_obs(self) -> np.ndarray | None:
        """bool ``[n * e]`` in flat (genome-major) cell order, or None when no episode is
        sampled."""
        sample = self.request.sample_obs
        return None if sample is None or not sample.any() else sample.reshape(-1)


class BaseEvaluator(abc.ABC):
    """Evaluates genomes: runs episodes of each and returns per-episode results.

    Episode ``(i, j)`` always runs genome ``i`` on seed ``episode_seeds[i, j]`` and
    observation moments are merged in ``[genome, episode]`` order, so every backend returns
    the same results for the same request, whatever its workers or nodes did. A backend
    holds threads or actors: use it as a context manager or call ``close``.
    """

    def evaluate(
        self,
        request: EvalRequest,
        *,
        max_steps: int | None = None,
        progress: Callable[[EvalProgress], None] | None = None,
        progress_interval_s: float = 1.0,
    ) -> EvalResults:
        """Runs every episode of ``request``, as the optimizer asked for it.

        Args:
            request: genomes (anything the backend's decoder accepts), episode seeds, action
                noise and observation sample (``Optimizer.ask`` returns one; build one with
                ``EvalRequest(genomes, episode_seeds)`` for a plain evaluation).
            max_steps: agent-step cutoff per episode (the episode counts as truncated), or
                None for the env's own cutoff only.
            progress: called from the caller's thread every ``progress_interval_s`` seconds
                and once at the end (with the backend's ``EvalProgress``).
            progress_interval_s: seconds between progress calls.

        Returns:
            Per-episode returns, sign returns, lengths, frames, end flags, env flags and final
            behaviour, observation statistics of the sampled episodes, and timing (the
            backend's ``EvalStats``); ``optimizer.tell(request, results)`` takes them as is.

        Raises:
            TypeError: ``request`` is not an ``EvalRequest``.
            ValueError: bad options, action noise for discrete actions, or genomes the
                backend cannot run.
            EvaluationError: the evaluation failed (the failing code's traceback in the
                message).
            KeyboardInterrupt: after stopping the backend's workers.
        """
        if not isinstance(request, EvalRequest):
            raise TypeError(
                f"evaluate takes an EvalRequest (from optimizer.ask(), or "
                f"EvalRequest(genomes, episode_seeds)), got {type(request).__name__}"
            )
        if max_steps is not None and (not _is_int(max_steps) or max_steps < 1):
            raise ValueError(f"max_steps must be an int >= 1 or None, got {max_steps!r}")
        if not progress_interval_s >= 0:
            raise ValueError(f"progress_interval_s must be >= 0, got {progress_interval_s!r}")
        return self._evaluate(EvalCall(request, max_steps, progress, progress_interval_s))

    @abc.abstractmethod
    def _evaluate(self, call: EvalCall) -> EvalResults:
        """``evaluate`` on checked arguments."""

    @abc.abstractmethod
    def set_obs_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Sets the float32 ``[d]`` observation statistics every network of the following
        evaluations normalises with (models with observation normalisation only)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stops a running evaluation and releases the backend's threads or actors."""

    def __enter__(self: _Evaluator) -> _Evaluator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)
