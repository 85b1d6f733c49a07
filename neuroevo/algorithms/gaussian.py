"""The family base of the Gaussian search distributions: OpenAI ES (isotropic, fixed sigma, a
gradient-following centre optimizer), PGPE, SNES, CEM, sep-CMA-ES, ARS (diagonal) and full
CMA-ES, xNES (dense).

Each generation samples ``x_k = m + s_k * std * z_k`` (diagonal) or ``x_k = m + A s_k z_k``
(dense), where ``z_k`` is a slice of the shared noise table at an index drawn from the
generation's mutation stream and ``s_k`` is +1, or +-1 for mirrored pairs; the strategy then
moves the distribution from the samples' fitness (:meth:`GaussianSearch._update`). An
optional "center" phase evaluates the new mean (its score is the summary's ``elite_score``),
and the elite is always the current mean.

Genomes: a diagonal sample is ``ESGenome(center_id, index, sign, 1.0, scale_id)`` with the mean
registered as the centre and the per-parameter std as the scale vector, so a genome is a few
integers and a remote node receives two float32 [P] vectors per generation. OpenAI ES, whose
std is one fixed sigma, registers the centre alone (``ESGenome(center_id, index, sign,
sigma)``). A dense sample is not of that form: it is registered whole (id ``center_id + 2 +
k``) and sent as a vector.

The distribution's numbers stay float64 in the State; the decoder gets float32 copies (OpenAI
ES keeps its float32 centre and Adam moments, as the ES paper's code does).
"""

from __future__ import annotations

import dataclasses
import math
import os
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuroevo.algorithms.base import (
    GenerationSummary,
    Optimizer,
    PhaseResult,
    PopulationParams,
    Stream,
)
from neuroevo.algorithms.centered import CenteredState, CenterIsElite
from neuroevo.core.params import check
from neuroevo.evaluation.request import EvalRequest, Phase
from neuroevo.genomes.genome import ESGenome
from neuroevo.genomes.noise import NoiseTable

__all__ = [
    "GaussianParams",
    "GaussianSearch",
    "GaussianState",
    "StepSizeState",
    "dense_memory_check",
    "nes_utilities",
    "stacked_noise",
]


@dataclass(frozen=True)
class GaussianParams(PopulationParams):
    """What every Gaussian strategy's section shares (each strategy sets its own defaults).

    Attributes:
        population_size: Samples per generation (n/2 mirrored pairs when ``mirrored``).
        sigma: Initial std of every parameter.
        mirrored: Evaluate each noise slice as the pair +z / -z (antithetic sampling).
        center_episodes: Episodes spent on the new mean each generation; 0 skips it.
        action_noise_std: Std of Gaussian noise added to the samples' actions (continuous
            actions only; 0 turns it off).
    """

    sigma: float = 0.1
    mirrored: bool = False
    center_episodes: int = 1
    action_noise_std: float = 0.0

    def _validate(self) -> None:
        self._validate_population()
        n = self.population_size
        check(not self.mirrored or n % 2 == 0, "population_size", n, "even when mirrored")
        check(self.sigma > 0, "sigma", self.sigma, "> 0")
        check(self.center_episodes >= 0, "center_episodes", self.center_episodes, ">= 0")
        noise = self.action_noise_std
        check(math.isfinite(noise) and noise >= 0, "action_noise_std", noise, ">= 0")


@dataclass(frozen=True, eq=False, kw_only=True)
class GaussianState(CenteredState):
    """What every Gaussian strategy's State holds (``center`` is the float64 mean m, registered
    as ``center_id``, the std as ``center_id + 1``); strategies add their own fields.

    Attributes:
        std: float64 [P], the per-parameter sampling std (diagonal strategies; dense ones keep
            the square root of the covariance diagonal here, for reporting).
    """

    std: np.ndarray


@dataclass(frozen=True, eq=False, kw_only=True)
class StepSizeState(GaussianState):
    """The State of a strategy with a global step size (CMA-ES, sep-CMA-ES, xNES), which the
    summaries report as sigma.

    Attributes:
        sigma: The step size.
    """

    sigma: float


def nes_utilities(fitness: np.ndarray) -> np.ndarray:
    """The NES rank utilities (Wierstra et al. 2014, eq. 12) of the n samples' ``fitness``,
    float64 [n] in sample order: the k-th best (ties: first come first) gets
    ``u_k = max(0, log(n/2 + 1) - log k) / sum_j max(0, log(n/2 + 1) - log j) - 1/n``."""
    n = len(fitness)
    k = np.arange(1, n + 1, dtype=np.float64)
    raw = np.maximum(0.0, math.log(n / 2 + 1) - np.log(k))
    utilities = np.empty(n)
    utilities[np.argsort(-fitness, kind="stable")] = raw / raw.sum() - 1.0 / n
    return utilities


def stacked_noise(noise: NoiseTable, indices: np.ndarray, length: int) -> np.ndarray:
    """float64 [len(indices), length], the noise slices as rows."""
    return np.stack([noise.get(int(i), length) for i in indices]).astype(np.float64)


def dense_memory_check(name: str, num_params: int, matrices: int, max_memory_gb: float) -> None:
    """Raises ValueError when ``matrices`` float64 [P, P] matrices exceed the limit or the
    machine's memory, naming the diagonal alternatives."""
    need = matrices * 8 * num_params**2
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        physical = need
    limit = min(max_memory_gb * 2**30, physical)
    if need > limit:
        raise ValueError(
            f"{name} keeps {matrices} dense [P, P] float64 matrices: {need / 2**30:.3g} GiB for "
            f"P={num_params} parameters, more than the {limit / 2**30:.3g} GiB allowed "
            f"(algorithm.{name}.max_memory_gb, or the machine's memory); use sep_cma_es or snes "
            "(diagonal, O(P) memory) for a network this large"
        )


class GaussianSearch(CenterIsElite, Optimizer):
    """Base of the Gaussian strategies: sampling, genomes, phases, registered vectors.

    A strategy defines ``_init_fields`` (its State fields at generation 0) and ``_update``
    (the new distribution from one generation's fitness); dense strategies set ``dense`` and
    implement ``_dense_samples``.
    """

    params_class = GaussianParams
    state_class: type[GaussianState] = GaussianState
    dense = False
    _params: GaussianParams
    _state: GaussianState

    @property
    def _id_stride(self) -> int:
        """Ids used per generation: mean, std, and (dense) one per sample."""
        return 2 + (self._params.population_size if self.dense else 0)

    def _init_state(self) -> GaussianState:
        rng = self._rng(0, Stream.INIT)
        index = self._noise.sample_index(rng, self._num_params)
        center = (self._decoder.scales * self._noise.get(index, self._num_params)).astype(
            np.float64
        )
        fields = {
            "center": center,
            "std": np.full(self._num_params, self._params.sigma),
            **self._init_fields(),
        }
        state = self.state_class(generation=0, phase=Phase.POPULATION, center_id=0, **fields)
        self._register(state)
        return state

    def _register(self, state: GaussianState) -> None:
        keep = 2 * self._id_stride
        self._decoder.set_center(state.center_id, state.center, keep=keep)
        self._decoder.set_center(state.center_id + 1, state.std, keep=keep)

    def _noise_indices(self, generation: int) -> np.ndarray:
        """int64 [n/2 if mirrored else n], ``generation``'s noise indices (one per pair)."""
        params = self._params
        count = params.population_size // 2 if params.mirrored else params.population_size
        rng = self._rng(generation, Stream.MUTATION)
        return self._noise.sample_indices(rng, self._num_params, count)

    def _samples(self, generation: int) -> tuple[np.ndarray, np.ndarray]:
        """(noise indices int64 [n], signs float64 [n]) of ``generation``'s samples, in
        population order (mirrored: +z, -z of each index in turn)."""
        indices = self._noise_indices(generation)
        if not self._params.mirrored:
            return indices, np.ones(len(indices))
        return np.repeat(indices, 2), np.tile([1.0, -1.0], len(indices))

    def _ask(self) -> EvalRequest:
        state = self._state
        if state.phase is Phase.CENTER:
            return self._center_request()
        return self._population_request(state, state.center_id)

    def _population_request(self, state: Any, center_id: int) -> EvalRequest:
        """The population phase's request: ``state.generation``'s samples around the centre
        registered as ``center_id``."""
        params = self._params
        indices, signs = self._samples(state.generation)
        genomes = self._sample_genomes(state, center_id, indices, signs)
        repeat = 2 if params.mirrored else 1
        request = self._request_for(genomes, params.population_episodes, Phase.POPULATION, repeat)
        return dataclasses.replace(request, action_noise_std=params.action_noise_std)

    def _sample_genomes(
        self, state: Any, center_id: int, indices: np.ndarray, signs: np.ndarray
    ) -> tuple[ESGenome, ...]:
        """The samples as genomes: a scaled noise slice each (diagonal), or each sample
        registered whole (dense)."""
        if self.dense:
            z = stacked_noise(self._noise, indices, self._num_params) * signs[:, None]
            first = center_id + 2
            for k, sample in enumerate(self._dense_samples(state, z)):
                self._decoder.set_center(first + k, sample, keep=2 * self._id_stride)
            return tuple(ESGenome(first + k, 0, 0, 0.0) for k in range(len(indices)))
        sigma, scale_id = self._noise_scale(center_id)
        return tuple(
            ESGenome(center_id, index, int(sign), sigma, scale_id)
            for index, sign in zip(indices.tolist(), signs.tolist(), strict=True)
        )

    def _noise_scale(self, center_id: int) -> tuple[float, int]:
        """(coefficient, scale vector id) of a diagonal sample's noise slice: 1 and the
        per-parameter std registered beside the centre."""
        return 1.0, center_id + 1

    def _tell(
        self, state: GaussianState, result: PhaseResult
    ) -> tuple[GaussianState, GenerationSummary | None]:
        if state.phase is Phase.CENTER:
            return self._center_scored(state, result)
        indices, signs = self._samples(state.generation)
        changes, extras = self._update(state, self._fitness_to_shape(result), indices, signs)
        next_state = dataclasses.replace(
            state, center_id=state.center_id + self._id_stride, **changes
        )
        self._register(next_state)
        summary = result.summary(state.generation, self._reported_sigma(state), extras)
        return self._population_scored(next_state, summary)

    def _reported_sigma(self, state: GaussianState) -> float:
        """The summary's sigma: the global step size of a strategy that has one, else the mean
        per-parameter std."""
        if isinstance(state, StepSizeState):
            return float(state.sigma)
        return float(state.std.mean())

    def _restored(self, state: GaussianState) -> None:
        self._register(state)

    # Strategy hooks.

    def _fitness_to_shape(self, result: PhaseResult) -> np.ndarray:
        """The per-sample values ``_update`` ranks: the fitness (ES: sign returns for its
        sign-rank shapings)."""
        return result.fitness

    def _init_fields(self) -> dict[str, Any]:
        """The strategy's own State fields at generation 0; a ``center`` or ``std`` entry
        replaces the initial mean (the model's initialisation) or std (``sigma`` for every
        parameter)."""
        return {}

    @abstractmethod
    def _update(
        self, state: GaussianState, fitness: np.ndarray, indices: np.ndarray, signs: np.ndarray
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """The new distribution from ``fitness`` (float64 [n], higher is better) of the samples
        ``(indices, signs)``: (State field changes, summary extras)."""

    def _dense_samples(self, state: GaussianState, z: np.ndarray) -> np.ndarray:
        """Dense strategies: float64 [n, P] samples from standard normal rows ``z``."""
        raise NotImplementedError
