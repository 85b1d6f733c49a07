"""The ask/tell optimizer interface of every registered algorithm. neuroevo **maximises**
fitness (episode return): higher is better in selection, shaping, summaries and the elite.

The records that flow between an optimizer and whoever evaluates its genomes:

- :class:`~neuroevo.evaluation.request.EvalRequest` (from :meth:`Optimizer.ask`, owned by
  :mod:`neuroevo.evaluation`): genomes, the episode seeds to run them with (``[n, e]``: e
  episodes each) and the action noise of their episodes. Seeds derive from ``(optimizer seed,
  generation, phase)`` only, so results never depend on how evaluation is scheduled.
- the evaluator's ``EvalResults`` (to :meth:`Optimizer.tell`, as is), or for a plain fitness
  loop the returns: float [n_genomes, episodes_per_genome]. A genome's fitness is the mean over
  its episodes. Optionally also the sign returns (per episode, the sum of ``sign(reward)``),
  which sign-rank shaping ranks instead of the returns.
- behaviours (in ``EvalResults.behavior`` or passed to :meth:`Optimizer.tell`, for the novelty
  algorithms, whose ``needs_behavior`` is True): ``[n_genomes, episodes_per_genome,
  *bc_shape]``, one behaviour characterisation per episode; a genome's BC is the mean over its
  episodes (Uber's ``get_mean_bc``).
- :class:`GenerationSummary` (from the ``tell`` that completes a generation).

A generation may take several ask/tell rounds, one per :class:`Phase` (the GA evaluates its
population, then re-evaluates its best candidates; the ES evaluates perturbations, then its
new centre). The caller just loops ask -> evaluate -> tell, as
:func:`~neuroevo.algorithms.fitness_loop.optimize` does.

NaN/inf policy (:mod:`neuroevo.algorithms.nan_policy`): a genome whose mean return is NaN or
+-inf counts as the worst of its phase; it is counted in ``GenerationSummary.nan_count`` and
warned about once per optimizer. If every genome of a selecting phase is non-finite, ``tell``
raises ``ValueError`` and leaves the state unchanged. What ``tell`` accepts is checked by
:mod:`neuroevo.algorithms.tell_checks`.

The base class owns ask/tell, best-so-far, seeding and checkpointing; a strategy implements
``_init_state``, ``_ask`` and ``_tell``, and keeps all per-generation state in one frozen
``State`` dataclass, which ``state_dict`` saves whole from its type hints
(:mod:`neuroevo.algorithms.state_io`): a strategy writes no checkpoint code. Every State has
``generation``, ``phase`` and ``pending`` (the summary of a generation between its phases).
What lives outside the State but follows from it (the ES centres registered with the decoder)
is rebuilt in the one hook ``_restored``.
"""

from __future__ import annotations

import dataclasses
import enum
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from neuroevo.algorithms.nan_policy import nonfinite_warning, phase_fitness
from neuroevo.algorithms.state_io import decode_state, encode_state
from neuroevo.algorithms.tell_checks import (
    check_pending,
    genome_behaviors,
    genome_means,
    unpack_results,
)
from neuroevo.core.params import Params, check
from neuroevo.evaluation.request import EvalRequest, Phase
from neuroevo.evaluation.results import EvalResults
from neuroevo.genomes.genome import DEFAULT_CACHE_BYTES, Genome, GenomeDecoder
from neuroevo.genomes.noise import NoiseTable

__all__ = [
    "GenerationSummary",
    "Optimizer",
    "PhaseResult",
    "PopulationParams",
    "Stream",
]


class Stream(enum.IntEnum):
    """Independent random streams; generation g of stream s uses rng(seed, g, s)."""

    INIT = 0
    SELECTION = 1
    MUTATION = 2
    POPULATION_EPISODES = 3
    VALIDATION_EPISODES = 4
    CENTER_EPISODES = 5
    ARCHIVE_EPISODES = 6
    ARCHIVE_INSERTION = 7


_EPISODE_STREAMS = {
    Phase.POPULATION: Stream.POPULATION_EPISODES,
    Phase.VALIDATION: Stream.VALIDATION_EPISODES,
    Phase.CENTER: Stream.CENTER_EPISODES,
    Phase.ARCHIVE: Stream.ARCHIVE_EPISODES,
}


@dataclass(frozen=True)
class GenerationSummary:
    """What happened in one generation; ``str()`` gives one log line.

    Attributes:
        generation: Generation number, from 0.
        best: Highest population fitness (finite values only; NaN if none).
        mean: Mean population fitness over finite values.
        median: Median population fitness over finite values.
        elite_score: Validation score of the GA elite, score of the ES centre, or None when
            the algorithm did not evaluate one.
        sigma: Mutation power / noise std used this generation, or None.
        nan_count: Genomes with NaN or inf fitness, over all phases.
        episodes: Episodes evaluated, over all phases.
        extras: Strategy-specific numbers (e.g. ES ``grad_norm``, ``update_ratio``).
    """

    generation: int
    best: float
    mean: float
    median: float
    elite_score: float | None
    sigma: float | None
    nan_count: int
    episodes: int
    extras: Mapping[str, float] = field(default_factory=dict)

    def __str__(self) -> str:
        parts = [
            f"gen {self.generation}",
            f"best {self.best:.6g} mean {self.mean:.6g} median {self.median:.6g}",
            f"elite {'-' if self.elite_score is None else f'{self.elite_score:.6g}'}",
            f"sigma {'-' if self.sigma is None else f'{self.sigma:.4g}'}",
            f"nan {self.nan_count}",
            f"episodes {self.episodes}",
            *(f"{key} {value:.4g}" for key, value in self.extras.items()),
        ]
        return " | ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """Returns a flat dict of plain Python values (extras as ``extras.<name>``)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        extras = data.pop("extras")
        return data | {f"extras.{key}": float(value) for key, value in extras.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GenerationSummary:
        """Inverts :meth:`as_dict`."""
        extras = {k.removeprefix("extras."): v for k, v in data.items() if k.startswith("extras.")}
        plain = {k: v for k, v in data.items() if not k.startswith("extras.")}
        return cls(**plain, extras=extras)


@dataclass(frozen=True, eq=False)
class PhaseResult:
    """One phase's returns reduced to per-genome fitness, after the NaN/inf policy.

    Attributes:
        raw: float64 [n], mean return per genome; may hold NaN or inf.
        fitness: float64 [n], what selection and updates use: ``raw`` (or the mean training
            return, when the results carry one) with non-finite values replaced by the worst
            (the centre phase only reports, so there it equals ``raw``).
        nan_count: Genomes whose ``raw`` is not finite.
        episodes: Episodes evaluated in the phase.
        sign_fitness: float64 [n], mean sign return per genome under the same NaN/inf policy,
            or None when the caller passed no sign returns.
        behavior: float64 [n, d], each genome's behaviour averaged over its episodes and
            flattened (trajectories become one long vector), or None when none was told.
    """

    raw: np.ndarray
    fitness: np.ndarray
    nan_count: int
    episodes: int
    sign_fitness: np.ndarray | None = None
    behavior: np.ndarray | None = None

    def stats(self) -> tuple[float, float, float]:
        """Returns (best, mean, median) of the finite raw fitness (NaN if there is none)."""
        finite = self.raw[np.isfinite(self.raw)]
        if finite.size == 0:
            return (float("nan"),) * 3
        return float(finite.max()), float(finite.mean()), float(np.median(finite))

    def summary(
        self, generation: int, sigma: float | None, extras: Mapping[str, float] | None = None
    ) -> GenerationSummary:
        """The summary of a generation whose population phase this is (no elite score yet)."""
        best, mean, median = self.stats()
        return GenerationSummary(
            generation=generation,
            best=best,
            mean=mean,
            median=median,
            elite_score=None,
            sigma=sigma,
            nan_count=self.nan_count,
            episodes=self.episodes,
            extras=extras or {},
        )

    def added_to(self, summary: GenerationSummary, **changes: Any) -> GenerationSummary:
        """``summary`` with this later phase's NaN count and episodes added, plus ``changes``."""
        return dataclasses.replace(
            summary,
            nan_count=summary.nan_count + self.nan_count,
            episodes=summary.episodes + self.episodes,
            **changes,
        )


def require(condition: bool, message: str) -> None:
    """Raises ``ValueError(message)`` unless ``condition``; for hyperparameter checks."""
    if not condition:
        raise ValueError(message)


@dataclass(frozen=True)
class PopulationParams(Params):
    """What every strategy's population phase takes: its size and the episodes per genome
    (a strategy's Params extend this class and may change the defaults).

    Attributes:
        population_size: Genomes per generation (see each strategy for what it counts).
        population_episodes: Episodes averaged into each genome's fitness.
    """

    needs_behavior: ClassVar[bool] = False
    """Whether the strategy's ``tell`` needs each episode's behaviour characterisation
    (novelty); the config checks it against the env before anything is built."""

    renamed: ClassVar[Mapping[str, str]] = {
        "population": "population_size",
        "episodes_per_genome": "population_episodes",
    }

    population_size: int = 1000
    population_episodes: int = 1

    def _validate(self) -> None:
        self._validate_population()

    def _validate_population(self) -> None:
        check(self.population_size >= 2, "population_size", self.population_size, ">= 2")
        episodes = self.population_episodes
        check(episodes >= 1, "population_episodes", episodes, ">= 1")

    def check_behavior_values(self, values: int) -> None:
        """Raises ``ParamError`` if behaviours of ``values`` numbers do not fit (any here)."""


class Optimizer(ABC):
    """Base of every ask/tell optimizer.

    Args:
        num_params: P, the length of a flat weight vector.
        scales: Per-parameter initialisation std, float32 [P] (0 for biases), or one float
            for all parameters (handy for toy problems).
        noise: The shared noise table; needs at least P values.
        seed: Seeds every random choice (initialisation, selection, mutation, episode seeds).
        params: Hyperparameters (the class's ``params_class``); None uses the paper defaults.
        cache_size: Byte budget of the decoder's parent cache.

    Raises:
        ValueError: For a bad ``num_params``, ``seed`` or ``scales``, or a noise table smaller
            than P.
        TypeError: If ``params`` is not an instance of ``params_class``.
    """

    name: ClassVar[str]
    params_class: ClassVar[type[Params]]
    needs_behavior: ClassVar[bool] = False
    """Whether :meth:`tell` needs each episode's behaviour characterisation (novelty); read
    from ``params_class``, which declares it."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.needs_behavior = getattr(getattr(cls, "params_class", None), "needs_behavior", False)

    def __init__(
        self,
        num_params: int,
        scales: np.ndarray | float,
        noise: NoiseTable,
        seed: int = 0,
        params: Any = None,
        cache_size: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        require(
            int(num_params) == num_params and num_params >= 1,
            f"num_params must be a positive integer, got {num_params!r}",
        )
        require(
            int(seed) == seed and seed >= 0, f"seed must be a non-negative integer, got {seed!r}"
        )
        num_params = int(num_params)
        scales = np.asarray(scales, dtype=np.float32)
        require(
            scales.shape in ((), (num_params,)),
            f"scales must be one float or a vector of num_params={num_params} stds, got shape "
            f"{scales.shape}",
        )
        self._params = self.params_class() if params is None else params
        if not isinstance(self._params, self.params_class):
            raise TypeError(
                f"{type(self).__name__} needs params of type {self.params_class.__name__}, "
                f"got {type(self._params).__name__}"
            )
        self._num_params = num_params
        self._seed = int(seed)
        self._noise = noise
        self._decoder = GenomeDecoder(noise, np.broadcast_to(scales, (num_params,)), cache_size)
        self._warned_nonfinite = False
        self._request: EvalRequest | None = None
        self._state: Any = self._init_state()

    # Public interface.

    @property
    def params(self) -> Any:
        """The frozen hyperparameters."""
        return self._params

    @property
    def decoder(self) -> GenomeDecoder:
        """Turns this optimizer's genomes into float32 [P] weights."""
        return self._decoder

    @property
    def num_params(self) -> int:
        """P."""
        return self._num_params

    @property
    def generation(self) -> int:
        """Number of completed generations (the one being evaluated)."""
        return self._state.generation

    @property
    @abstractmethod
    def elite(self) -> Genome | None:
        """The algorithm's current best solution, or None before it has one."""

    @property
    @abstractmethod
    def elite_score(self) -> float | None:
        """The elite's score as the algorithm judged it, or None if never evaluated."""

    def ask(self) -> EvalRequest:
        """Returns what to evaluate next. Repeated calls return the same request."""
        if self._request is None:
            self._request = self._ask()
        return self._request

    def tell(
        self,
        request: EvalRequest,
        returns: EvalResults | np.ndarray,
        sign_returns: np.ndarray | None = None,
        behaviors: np.ndarray | None = None,
    ) -> GenerationSummary | None:
        """Feeds back the results of the last request.

        Args:
            request: The request from the last :meth:`ask`.
            returns: The evaluator's ``EvalResults`` for ``request`` (its returns, sign
                returns and behaviours are all used; its ``training_returns``, when set, are
                what selection and updates see, while summaries report the returns), or float
                [n_genomes,
                episodes_per_genome] episode returns from a plain fitness loop.
            sign_returns: With a returns array: float, the same shape, per episode the sum of
                ``sign(reward)``; needed by sign-rank fitness shaping only.
            behaviors: With a returns array: ``[n_genomes, episodes_per_genome, *bc_shape]``
                behaviour characterisations, required when ``needs_behavior`` (else ignored).

        Returns:
            The summary when this completes a generation, else None (more phases follow).

        Raises:
            ValueError: If ``request`` is not the pending one, ``returns``, ``sign_returns``
                or ``behaviors`` has the wrong shape, every genome of a selecting phase has
                non-finite fitness, or the strategy needs ``sign_returns`` or ``behaviors``
                and got none.
            TypeError: ``sign_returns`` or ``behaviors`` given beside ``EvalResults``.
        """
        returns, training, sign_returns, behaviors = unpack_results(
            returns, sign_returns, behaviors
        )
        pending = self.ask()
        check_pending(request, pending)
        shape = pending.episode_seeds.shape
        raw = genome_means(returns, shape, "returns")
        if training is not None:  # the centre phase only reports its returns
            training = (
                None
                if pending.phase is Phase.CENTER
                else genome_means(training, shape, "training_returns")
            )
        if sign_returns is not None:
            sign_returns = genome_means(sign_returns, shape, "sign_returns")
        fitness, sign_fitness, nan_count = phase_fitness(pending.phase, raw, training, sign_returns)
        if nan_count and not self._warned_nonfinite:
            self._warned_nonfinite = True
            warnings.warn(
                nonfinite_warning(nan_count, raw.size, pending.generation, pending.phase),
                RuntimeWarning,
                stacklevel=2,
            )
        behavior = None
        if self.needs_behavior:
            behavior = genome_behaviors(self.name, behaviors, shape)
        result = PhaseResult(
            raw, fitness, nan_count, raw.size * pending.episodes_per_genome, sign_fitness, behavior
        )
        self._state, summary = self._tell(self._state, result)
        self._request = None
        return summary

    def state_dict(self) -> dict[str, Any]:
        """Returns the full optimizer state as a flat dict for a YAML + npz checkpoint: the
        run's identity (algorithm, seed, parameter count, noise table) and every State field
        (:mod:`neuroevo.algorithms.state_io`); not the hyperparameters (rebuild the optimizer
        from the same config, then load the state)."""
        return self._identity() | encode_state(self._state)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores a :meth:`state_dict`; the run then continues exactly as if never stopped.

        Raises:
            ValueError: If the checkpoint is from another algorithm, seed, parameter count or
                noise table, or does not hold a valid State of this optimizer (a missing or
                unknown key, a value of the wrong type, dtype or shape); the message names
                the key. The optimizer is unchanged then.
        """
        identity = self._identity()
        for key, value in identity.items():
            if key not in state:
                raise ValueError(f"optimizer checkpoint lacks '{key}': not an optimizer state")
            if state[key] != value:
                raise ValueError(
                    f"checkpoint has {key}={state[key]!r} but this optimizer has "
                    f"{key}={value!r}; build the optimizer with the checkpoint's settings"
                )
        fields = {key: value for key, value in state.items() if key not in identity}
        restored = decode_state(type(self._state), fields, self._state)
        self._restored(restored)
        self._state = restored
        self._request = None

    def _identity(self) -> dict[str, Any]:
        """What a checkpoint must share with this optimizer to load into it."""
        return {
            "algorithm": self.name,
            "num_params": self._num_params,
            "seed": self._seed,
            "noise_seed": self._noise.seed,
            "noise_size": len(self._noise),
        }

    # Helpers for strategies.

    def _rng(self, generation: int, stream: Stream) -> np.random.Generator:
        """Returns the generator of ``stream`` for ``generation``, independent of all others."""
        return np.random.default_rng([self._seed, generation, int(stream)])

    def _request_for(
        self, genomes: tuple[Genome, ...], episodes: int, phase: Phase, repeat: int = 1
    ) -> EvalRequest:
        """Builds a request; each row of seeds is shared by ``repeat`` consecutive genomes.

        Sharing seeds (common random numbers) makes comparisons between genomes fairer: the
        GA's validation candidates and the ES's mirrored pairs see the same episodes.
        """
        rows = len(genomes) // repeat
        rng = self._rng(self._state.generation, _EPISODE_STREAMS[phase])
        seeds = np.repeat(rng.integers(0, 2**31, size=(rows, episodes), dtype=np.int64), repeat, 0)
        return EvalRequest(genomes, seeds, phase, self._state.generation)

    # Strategy hooks.

    @abstractmethod
    def _init_state(self) -> Any:
        """Returns the State of generation 0."""

    @abstractmethod
    def _ask(self) -> EvalRequest:
        """Returns the request for the current state (must not change the state)."""

    @abstractmethod
    def _tell(self, state: Any, result: PhaseResult) -> tuple[Any, GenerationSummary | None]:
        """Returns the next State and, if the generation is complete, its summary."""

    def _restored(self, state: Any) -> None:  # noqa: B027 (optional hook)
        """Called with a State just loaded from a checkpoint, before it becomes current:
        re-registers with the decoder whatever the State's genomes refer to (ES centres)."""
