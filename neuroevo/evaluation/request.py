"""The one record that travels from an optimizer to an evaluator: what to evaluate and how.

``Optimizer.ask`` returns an :class:`EvalRequest`; ``evaluator.evaluate(request)`` runs it as
is, on any backend; ``optimizer.tell(request, results)`` takes the evaluator's results back.
Everything that decides an episode's outcome travels in the request (genomes, episode seeds,
action noise) together with what the caller wants recorded (the observation sample), so a
hand-written loop cannot drop a field. Per-call options that change no result (a step cutoff
for a quick look, a progress callback) are keyword arguments of ``evaluate``.

numpy only: the algorithms import this module, and importing it must not import TensorFlow.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["EvalRequest", "Phase", "check_action_noise_fits", "draw_obs_sample"]


class Phase(str, enum.Enum):
    """What an :class:`EvalRequest` evaluates within a generation."""

    POPULATION = "population"
    VALIDATION = "validation"
    CENTER = "center"
    ARCHIVE = "archive"
    """The novelty ES's initial meta-population, evaluated once to seed the archive."""


@dataclasses.dataclass(frozen=True, eq=False)
class EvalRequest:
    """Genomes to evaluate and how; checked when built, read-only afterwards.

    Episode ``(i, j)`` runs genome ``i`` from seed ``episode_seeds[i, j]``, so the results
    depend on the request only, never on which backend, worker or node ran it.

    Attributes:
        genomes: the n genomes, in whatever form the evaluator's decoder accepts (a tuple).
        episode_seeds: int64 ``[n, e]``, read-only: e episodes per genome. Integer arrays of
            another width are widened (unsigned 64-bit values keep their bits); anything
            else is rejected, never rounded or cast.
        phase: which part of the generation this is (set by the optimizer).
        generation: the generation it belongs to.
        action_noise_std: std of the Gaussian noise added to every continuous action of these
            episodes (0: none), drawn from the episode seed and step
            (:mod:`neuroevo.evaluation.action_noise`): the ES's training rollouts only.
        sample_obs: bool ``[n, e]``, read-only: the episodes whose observations go into
            ``EvalResults.obs_stats`` (observation normalisation), or None for none.

    Raises:
        ValueError: a field of the wrong type, shape or range, naming it.
    """

    genomes: Sequence[Any]
    episode_seeds: np.ndarray
    phase: Phase = Phase.POPULATION
    generation: int = 0
    action_noise_std: float = 0.0
    sample_obs: np.ndarray | None = None

    def __post_init__(self) -> None:
        genomes = tuple(self.genomes)
        seeds = _seed_matrix(self.episode_seeds, len(genomes))
        if not isinstance(self.phase, Phase):
            try:
                object.__setattr__(self, "phase", Phase(self.phase))
            except ValueError:
                names = ", ".join(p.value for p in Phase)
                raise ValueError(f"phase must be one of {names}, got {self.phase!r}") from None
        if not _is_int(self.generation) or self.generation < 0:
            raise ValueError(f"generation must be an int >= 0, got {self.generation!r}")
        check_action_noise_fits(self.action_noise_std, discrete_actions=False)
        sample = self.sample_obs
        if sample is not None:
            sample = np.asarray(sample)
            if sample.shape != seeds.shape or sample.dtype != bool:
                raise ValueError(
                    f"sample_obs must be bool of shape {seeds.shape} (genomes, episodes), "
                    f"got {sample.dtype} {sample.shape}"
                )
            sample = _read_only(sample)
        object.__setattr__(self, "genomes", genomes)
        object.__setattr__(self, "episode_seeds", seeds)
        object.__setattr__(self, "generation", int(self.generation))
        object.__setattr__(self, "action_noise_std", float(self.action_noise_std))
        object.__setattr__(self, "sample_obs", sample)

    @property
    def episodes_per_genome(self) -> int:
        """e."""
        return int(self.episode_seeds.shape[1])

    @property
    def num_episodes(self) -> int:
        """n * e."""
        return int(self.episode_seeds.size)

    def with_obs_sample(self, sample_obs: np.ndarray | None) -> EvalRequest:
        """This request with ``sample_obs`` replaced (see :func:`draw_obs_sample`)."""
        return dataclasses.replace(self, sample_obs=sample_obs)


def draw_obs_sample(request: EvalRequest, fraction: float, seed: int, index: int) -> np.ndarray:
    """bool ``[n, e]``: a ``fraction`` share of ``request``'s episodes, drawn from ``seed``,
    the request's generation and ``index`` (the request's position within its generation), so
    a resumed run samples the same episodes."""
    rng = np.random.default_rng([seed, request.generation, index, 0x0B5])
    return rng.random(request.episode_seeds.shape) < fraction


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


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view (the caller's array stays writable)."""
    view = array.view()
    view.flags.writeable = False
    return view


def _seed_matrix(value: Any, num_genomes: int) -> np.ndarray:
    """``value`` as read-only int64 ``[num_genomes, e]`` with e >= 1, never rounded."""
    try:
        seeds = np.asarray(value)
    except (OverflowError, ValueError) as exc:  # ragged lists, ints beyond 64 bits
        raise ValueError(f"episode_seeds must be integers, got {value!r} ({exc})") from None
    if seeds.dtype.kind not in "iu" and not (seeds.size == 0 and seeds.dtype == np.float64):
        kind = "bool" if seeds.dtype == bool else seeds.dtype.name
        if seeds.dtype == object:
            kind = "Python ints beyond 64 bits or mixed objects"
        raise ValueError(
            f"episode_seeds must be integers, got {kind}: neuroevo never rounds or casts them"
        )
    if seeds.ndim != 2 or seeds.shape[0] != num_genomes or seeds.shape[1] < 1:
        raise ValueError(
            f"episode_seeds must have shape ({num_genomes}, episodes_per_genome >= 1) "
            f"(genomes, episodes), got {seeds.shape}"
        )
    seeds = seeds.view(np.int64) if seeds.dtype == np.uint64 else seeds.astype(np.int64, copy=False)
    return _read_only(seeds)
