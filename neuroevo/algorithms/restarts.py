"""IPOP and BIPOP restarts around a CMA-type strategy (``cma_es``, ``sep_cma_es``, ``lm_ma_es``):
Auger & Hansen 2005, "A Restart CMA Evolution Strategy With Increasing Population Size"
(IPOP); Hansen 2009, "Benchmarking a BI-Population CMA-ES on the BBOB-2009 Function Testbed"
(BIPOP), with the regime bookkeeping of pycma's ``fmin``.

A run of the wrapped strategy ends when it has converged, by pycma's two main criteria:

- ``tol_fun``: over the last ``10 + ceil(30 P / lambda)`` generations the best fitness varied
  by less than ``tol_fun``, and so did the last generation's fitness values;
- ``tol_x``: every parameter's sampling std (``sigma sqrt(C_ii)``) is below ``tol_x``;

then a new run starts from a new initial mean (the model's initialisation drawn again) with:

- IPOP: the population times ``population_factor`` (2) at each restart, the initial sigma;
- BIPOP: a large run as IPOP's (``lambda_0 * factor^k`` at the k-th large run) whenever the
  evaluations spent in small runs (the first run counts as one) reach those spent in large
  runs, else a small run of ``floor(lambda_0 * (factor^k)^(u^2))`` samples, initial step
  ``sigma_0 * 0.01^u'`` (u, u' uniform in [0, 1)) and at most half the large runs' evaluations.

Restarts stop after ``max_restarts`` large ones (small runs do not count), as in pycma; the last
run then goes on. pycma's other stopping rules (stagnation, condition number, flat fitness) are
not used: on a noisy RL return they would stop nothing the two above do not.

The wrapper is an :class:`~neuroevo.algorithms.base.Optimizer` holding one optimizer of the
wrapped class per run, built with the run's population and sigma and a seed drawn from
``(seed, restart)``; each run counts its own generations from 0, as the strategy's updates
expect. The run's genomes refer to vectors the run registered with its own decoder; the
wrapper copies them into its decoder, the one the evaluator uses, under ids shifted past every
earlier run's, so no id is ever reused. The elite is the current run's mean (its score the
summary's ``elite_score``); the trainer's ``best.npz`` keeps the best-scoring one across
runs. The checkpoint is the wrapper's :class:`RestartState` plus the current run's state under
``inner.*``: a resume rebuilds that run and continues it exactly.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuroevo.algorithms.base import GenerationSummary, Optimizer, PhaseResult
from neuroevo.algorithms.gaussian import GaussianSearch
from neuroevo.core.params import Params, check
from neuroevo.evaluation.request import EvalRequest, Phase
from neuroevo.genomes.genome import DEFAULT_CACHE_BYTES, ESGenome, Genome
from neuroevo.genomes.noise import NoiseTable

__all__ = ["RestartKind", "RestartParams", "RestartState", "Restarts", "with_restarts"]


class RestartKind(enum.Enum):
    """Which restart schedule: none, IPOP or BIPOP."""

    NONE = "none"
    IPOP = "ipop"
    BIPOP = "bipop"


@dataclass(frozen=True)
class RestartParams(Params):
    """The ``restarts`` section of a CMA-type strategy (``algorithm.cma_es.restarts``).

    Attributes:
        kind: ``none``, ``ipop`` or ``bipop``.
        max_restarts: Restarts with a larger population (BIPOP's small runs do not count).
        population_factor: Population growth per large restart.
        tol_fun: A run has converged when its best fitness varied less than this over the
            last ``10 + ceil(30 P / lambda)`` generations and its last fitness values too.
        tol_x: A run has also converged when every parameter's sampling std is below this.
    """

    kind: RestartKind = RestartKind.NONE
    max_restarts: int = 9
    population_factor: float = 2.0
    tol_fun: float = 1e-11
    tol_x: float = 1e-11

    def _validate(self) -> None:
        check(self.max_restarts >= 0, "max_restarts", self.max_restarts, ">= 0")
        factor = self.population_factor
        check(factor > 1, "population_factor", factor, "> 1")
        check(self.tol_fun >= 0, "tol_fun", self.tol_fun, ">= 0")
        check(self.tol_x >= 0, "tol_x", self.tol_x, ">= 0")


@dataclass(frozen=True, eq=False, kw_only=True)
class RestartState:
    """The restart bookkeeping (the current run's own State is checkpointed beside it).

    Attributes:
        generation: Generations over all runs.
        phase: The current run's phase.
        restart: Runs started before the current one.
        large_runs: Runs with an increased population so far (every IPOP restart).
        small: Whether the current run counts on BIPOP's small budget (the first run does).
        population_size: lambda of the current run.
        sigma: Initial step size of the current run.
        run_generations: Generations of the current run.
        max_run_generations: A BIPOP small run's generation limit, else None.
        small_evaluations: Samples evaluated by runs counted as small.
        large_evaluations: Samples evaluated by large runs.
        history: float64 [run_generations], the best fitness of each of the run's generations.
        last_range: Max minus min of the last population phase's fitness.
        id_base: Added to the current run's decoder ids.
    """

    generation: int
    phase: Phase
    restart: int = 0
    large_runs: int = 0
    small: bool = True
    population_size: int
    sigma: float
    run_generations: int = 0
    max_run_generations: int | None = None
    small_evaluations: int = 0
    large_evaluations: int = 0
    history: np.ndarray
    last_range: float = math.inf
    id_base: int = 0


class Restarts(Optimizer):
    """IPOP / BIPOP restarts of ``strategy``; see the module docstring. Build one with
    :func:`with_restarts` (``make_algorithm`` does when ``restarts.kind`` is not ``none``)."""

    strategy: type[GaussianSearch]
    _state: RestartState

    def __init__(
        self,
        num_params: int,
        scales: np.ndarray | float,
        noise: NoiseTable,
        seed: int = 0,
        params: Any = None,
        cache_size: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self._scales, self._cache_size = scales, cache_size  # each run's optimizer gets them
        self._loaded_inner: Mapping[str, Any] = {}
        super().__init__(num_params, scales, noise, seed, params, cache_size)

    # What the trainer and notebooks read.

    @property
    def elite(self) -> Genome:
        """The current run's mean, registered with this optimizer's decoder."""
        return self._shifted(self._inner.elite)

    @property
    def elite_score(self) -> float | None:
        """The current run's mean's last score, or None."""
        return self._inner.elite_score

    @property
    def center(self) -> np.ndarray:
        """[P], read-only: the current run's mean."""
        return self._inner.center

    @property
    def restart_options(self) -> RestartParams:
        """The ``restarts`` section."""
        return self._params.restarts

    def state_dict(self) -> dict[str, Any]:
        """The wrapper's state and the current run's under ``inner.*``."""
        inner = {f"inner.{key}": value for key, value in self._inner.state_dict().items()}
        return super().state_dict() | inner

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores a :meth:`state_dict`: the run it was in is rebuilt and loaded.

        Raises:
            ValueError: As :meth:`Optimizer.load_state_dict`, for either part.
        """
        own = {key: value for key, value in state.items() if not key.startswith("inner.")}
        self._loaded_inner = {
            key.removeprefix("inner."): value
            for key, value in state.items()
            if key.startswith("inner.")
        }
        try:
            super().load_state_dict(own)
        finally:
            self._loaded_inner = {}

    # Optimizer hooks.

    def _init_state(self) -> RestartState:
        params = self._params
        state = RestartState(
            generation=0,
            phase=Phase.POPULATION,
            population_size=params.population_size,
            sigma=params.sigma,
            history=np.zeros(0),
        )
        self._inner = self._run_optimizer(state)
        return state

    def _restored(self, state: RestartState) -> None:
        inner = self._run_optimizer(state)
        inner.load_state_dict(self._loaded_inner)
        self._inner = inner

    def _ask(self) -> EvalRequest:
        request = self._inner.ask()
        genomes = tuple(self._shifted(genome) for genome in request.genomes)
        return dataclasses.replace(request, genomes=genomes, generation=self._state.generation)

    def _tell(
        self, state: RestartState, result: PhaseResult
    ) -> tuple[RestartState, GenerationSummary | None]:
        inner = self._inner
        inner_state, summary = inner._tell(inner._state, result)
        inner._state, inner._request = inner_state, None
        if state.phase is Phase.POPULATION:
            state = dataclasses.replace(state, last_range=float(np.ptp(result.fitness)))
        if summary is None:
            return dataclasses.replace(state, phase=inner_state.phase), None
        extras = {"restart": float(state.restart), "population": float(state.population_size)}
        summary = dataclasses.replace(
            summary, generation=state.generation, extras={**summary.extras, **extras}
        )
        state = dataclasses.replace(
            state,
            generation=state.generation + 1,
            phase=inner_state.phase,
            run_generations=state.run_generations + 1,
            history=np.append(state.history, summary.best),
        )
        if self._run_ended(state) and state.large_runs < self.restart_options.max_restarts:
            state = self._next_run(state)
            self._inner = self._run_optimizer(state)
        return state, summary

    # Runs.

    def _run_optimizer(self, state: RestartState) -> GaussianSearch:
        """A fresh optimizer of the wrapped strategy for ``state``'s run."""
        seed = int(np.random.default_rng([self._seed, state.restart]).integers(2**31))
        params = dataclasses.replace(
            self._params,
            population_size=state.population_size,
            sigma=state.sigma,
            restarts=RestartParams(),
        )
        return self.strategy(
            self._num_params, self._scales, self._noise, seed, params, self._cache_size
        )

    def _run_ended(self, state: RestartState) -> bool:
        """Whether the current run has converged (or used a small run's generations)."""
        options = self.restart_options
        limit = state.max_run_generations
        if limit is not None and state.run_generations >= limit:
            return True
        window = 10 + math.ceil(30 * self._num_params / state.population_size)
        history = state.history[-window:]
        flat = len(history) == window and np.ptp(history) < options.tol_fun
        if flat and state.last_range < options.tol_fun:
            return True
        return bool(np.max(self._inner._state.std) < options.tol_x)

    def _next_run(self, state: RestartState) -> RestartState:
        """The state that starts the run after ``state``'s, by the restart schedule."""
        options, params = self.restart_options, self._params
        spent = state.run_generations * state.population_size
        small = state.small_evaluations + (spent if state.small else 0)
        large = state.large_evaluations + (0 if state.small else spent)
        restart = state.restart + 1
        u_population, u_sigma = np.random.default_rng([self._seed, restart, 1]).random(2)
        growth = options.population_factor**state.large_runs
        changes: dict[str, Any]
        if options.kind is RestartKind.BIPOP and small < max(1, large):
            population = int(params.population_size * growth ** (u_population**2))
            population += population % 2 if params.mirrored else 0
            changes = {
                "small": True,
                "population_size": population,
                "sigma": params.sigma * 0.01**u_sigma,
                "max_run_generations": max(1, int(0.5 * large / population)),
            }
        else:
            population = round(params.population_size * growth * options.population_factor)
            population += population % 2 if params.mirrored else 0
            changes = {
                "small": False,
                "large_runs": state.large_runs + 1,
                "population_size": population,
                "sigma": params.sigma,
                "max_run_generations": None,
            }
        return dataclasses.replace(
            state,
            **changes,
            restart=restart,
            phase=Phase.POPULATION,
            run_generations=0,
            small_evaluations=small,
            large_evaluations=large,
            history=np.zeros(0),
            last_range=math.inf,
            id_base=state.id_base + self._inner.elite.center_id + 1,
        )

    def _shifted(self, genome: Genome) -> Genome:
        """``genome`` of the current run with its vector ids moved past earlier runs', the
        vectors copied into this optimizer's decoder."""
        assert isinstance(genome, ESGenome), "CMA-type strategies make ES genomes"
        base, inner = self._state.id_base, self._inner.decoder
        keep = 2 * (2 + self._inner.params.population_size) + 1
        for vector_id in genome.vector_ids:
            self._decoder.set_center(base + vector_id, inner.center(vector_id), keep=keep)
        scale_id = genome.scale_id if genome.scale_id < 0 else base + genome.scale_id
        return dataclasses.replace(genome, center_id=base + genome.center_id, scale_id=scale_id)


@functools.cache
def with_restarts(strategy: type[GaussianSearch]) -> type[Restarts]:
    """The :class:`Restarts` class for ``strategy`` (same name, params and checkpoint
    identity), made once per strategy."""
    return type(
        f"{strategy.__name__}WithRestarts",
        (Restarts,),
        {
            "name": strategy.name,
            "params_class": strategy.params_class,
            "strategy": strategy,
            "__doc__": f"{strategy.__name__} with IPOP / BIPOP restarts.",
        },
    )
