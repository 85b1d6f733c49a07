"""The contract every evaluation backend implements: ``evaluate`` a population's episodes.

``BaseEvaluator.evaluate`` holds the signature, the argument checks and the documentation
once; a backend (the pipelined local ``Evaluator``, the Ray cluster's ``RayEvaluator``)
implements ``_evaluate`` on an already checked ``EvalRequest`` and ``close``. Callers (the
trainer, ``evaluate``, the optimizers) see only this contract, so backends are interchangeable.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from neuroevo.evaluation.results import EvalProgress, EvalResults
from neuroevo.indices import seed_array

_Evaluator = TypeVar("_Evaluator", bound="BaseEvaluator")


class EvaluationError(RuntimeError):
    """An evaluation failed in a worker or on a cluster node. The message holds the failing
    code's traceback; ``__cause__`` is the original exception when it was raised locally."""


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class EvalRequest:
    """The checked arguments of one ``evaluate`` call (see ``BaseEvaluator.evaluate``).

    Attributes:
        genomes: one per population member.
        seeds: int64 ``[len(genomes), episodes_per_genome]``.
        max_steps: agent-step cutoff per episode, or None.
        progress: progress callback, or None.
        progress_interval_s: seconds between progress calls.
        sample_obs: bool ``[len(genomes) * episodes_per_genome]`` in flat (genome-major) cell
            order, or None when no episode is sampled.
        action_noise_std: std of the Gaussian noise added to every continuous action (0: none).
    """

    genomes: Sequence[Any]
    seeds: np.ndarray
    max_steps: int | None
    progress: Callable[[EvalProgress], None] | None
    progress_interval_s: float
    sample_obs: np.ndarray | None
    action_noise_std: float = 0.0

    @property
    def episodes_per_genome(self) -> int:
        return int(self.seeds.shape[1])


class BaseEvaluator(abc.ABC):
    """Evaluates genomes: runs episodes of each and returns per-episode results.

    Episode ``(i, j)`` always runs genome ``i`` on seed ``episode_seeds[i, j]`` and
    observation moments are merged in ``[genome, episode]`` order, so every backend returns
    the same results for the same arguments, whatever its workers or nodes did. A backend
    holds threads or actors: use it as a context manager or call ``close``.
    """

    def evaluate(
        self,
        genomes: Sequence[Any],
        episodes_per_genome: int,
        episode_seeds: np.ndarray,
        max_steps: int | None = None,
        progress: Callable[[EvalProgress], None] | None = None,
        progress_interval_s: float = 1.0,
        sample_obs: np.ndarray | None = None,
        action_noise_std: float = 0.0,
    ) -> EvalResults:
        """Runs ``episodes_per_genome`` episodes of every genome.

        Args:
            genomes: anything the backend's decoder accepts, one per population member.
            episodes_per_genome: episodes per genome.
            episode_seeds: int64 ``[len(genomes), episodes_per_genome]``; episode ``(i, j)``
                uses seed ``episode_seeds[i, j]``.
            max_steps: agent-step cutoff per episode (the episode counts as truncated), or
                None for the env's own cutoff only.
            progress: called from the caller's thread every ``progress_interval_s`` seconds
                and once at the end (with the backend's ``EvalProgress``).
            progress_interval_s: seconds between progress calls.
            sample_obs: bool ``[len(genomes), episodes_per_genome]``: the episodes whose
                observations (those the networks act on) go into ``results.obs_stats``, for
                observation normalisation; None or all False collects none.
            action_noise_std: std of the Gaussian noise added to every action (continuous
                actions only; 0 adds none), a function of the episode seed and step
                (``action_noise``), so the same seed gives the same noisy episode.

        Returns:
            Per-episode returns, sign returns, lengths, frames, end flags, env flags and final
            behaviour, observation statistics when sampled, and timing (the backend's
            ``EvalStats``).

        Raises:
            ValueError: bad arguments (``InvalidInputError`` for seeds that are not 64-bit
                integers: they are never rounded), or genomes the backend cannot run.
            EvaluationError: the evaluation failed (the failing code's traceback in the
                message).
            KeyboardInterrupt: after stopping the backend's workers.
        """
        return self._evaluate(
            _checked_request(
                genomes,
                episodes_per_genome,
                episode_seeds,
                max_steps,
                progress,
                progress_interval_s,
                sample_obs,
                action_noise_std,
            )
        )

    @abc.abstractmethod
    def _evaluate(self, request: EvalRequest) -> EvalResults:
        """``evaluate`` on checked arguments."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stops a running evaluation and releases the backend's threads or actors."""

    def __enter__(self: _Evaluator) -> _Evaluator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _checked_request(
    genomes: Sequence[Any],
    episodes_per_genome: int,
    episode_seeds: np.ndarray,
    max_steps: int | None,
    progress: Callable[[EvalProgress], None] | None,
    progress_interval_s: float,
    sample_obs: np.ndarray | None,
    action_noise_std: float,
) -> EvalRequest:
    if not _is_int(episodes_per_genome) or episodes_per_genome < 1:
        raise ValueError(f"episodes_per_genome must be an int >= 1, got {episodes_per_genome!r}")
    expected = (len(genomes), episodes_per_genome)
    seeds = seed_array(episode_seeds, "episode_seeds")
    if seeds.shape != expected:
        raise ValueError(f"episode_seeds must have shape {expected}, got {seeds.shape}")
    if max_steps is not None and (not _is_int(max_steps) or max_steps < 1):
        raise ValueError(f"max_steps must be an int >= 1 or None, got {max_steps!r}")
    if not progress_interval_s >= 0:
        raise ValueError(f"progress_interval_s must be >= 0, got {progress_interval_s!r}")
    if sample_obs is not None:
        sample_obs = np.asarray(sample_obs)
        if sample_obs.shape != expected or sample_obs.dtype != bool:
            raise ValueError(
                f"sample_obs must be bool of shape {expected}, "
                f"got {sample_obs.dtype} {sample_obs.shape}"
            )
        sample_obs = sample_obs.reshape(-1) if sample_obs.any() else None
    check_action_noise_fits(action_noise_std, discrete_actions=False)
    return EvalRequest(
        genomes, seeds, max_steps, progress, progress_interval_s, sample_obs, action_noise_std
    )


def check_action_noise_fits(std: object, discrete_actions: bool) -> None:
    """Raises ValueError unless ``std`` is a finite number >= 0 that fits the action space."""
    if (
        isinstance(std, bool)
        or not isinstance(std, int | float | np.integer | np.floating)
        or not (np.isfinite(std) and std >= 0)
    ):
        raise ValueError(f"action_noise_std must be a finite number >= 0, got {std!r}")
    if std > 0 and discrete_actions:
        raise ValueError(
            f"action_noise_std={std} needs continuous actions, but the env's actions are "
            "discrete; use 0"
        )
