"""CMA-ME and CMA-MAE: quality diversity driven by CMA-ES emitters, on MAP-Elites' grid
archive (Fontaine, Togelius, Nikolaidis & Hoover 2020, "Covariance Matrix Adaptation for the
Rapid Illumination of Behavior Space", GECCO, arXiv:1912.02400; Fontaine & Nikolaidis 2023,
"Covariance Matrix Adaptation MAP-Annealing", GECCO, arXiv:2205.10752).

Each generation, each of ``emitters`` CMA-ES instances samples its share of the population,
``x = m + sigma * B D z``; every sample is inserted into the archive, in order, and each
emitter then updates its mean, step size and covariance (the formulas of Hansen's tutorial,
shared with :mod:`~neuroevo.algorithms.cma_es`) from its samples ranked by how much they
improved the archive:

- **CMA-ME** (improvement emitter): samples that filled an empty cell come first, by fitness;
  then those that beat a cell's elite, by the improvement ``f - f_elite``; the rest are
  dropped. The ``mu`` samples added are the parents, weighted ``ln(mu + 1/2) - ln i``. An
  emitter none of whose samples was added restarts.
- **CMA-MAE**: every cell has a threshold ``t_e``, initially ``threshold_min``. A sample's
  improvement is ``f - t_e``; when positive, the threshold anneals towards it:
  ``t_e <- (1 - alpha) t_e + alpha f`` (``alpha`` = ``archive_learning_rate``), applied
  sample by sample as in the paper's Algorithm 1 (a second sample in the same cell sees the
  updated threshold). All samples are ranked by improvement and the best half are the
  parents (the tutorial's weights). ``alpha = 1`` makes each threshold the best fitness
  seen in its cell (CMA-ME's archive, above ``threshold_min``); ``alpha = 0`` ranks by
  fitness alone (CMA-ES).

Both restart an emitter whose CMA-ES has converged (condition number of C above 1e14, step
``sigma * max(D)`` below 1e-11, or all its samples' ranking values within 1e-12: the
tolerances of pycma, which pyribs uses): the mean jumps to an elite drawn uniformly from the
archive, ``sigma`` back to its initial value, ``C`` to I and the paths to 0.

Samples enter the archive one at a time, in emitter order, as the papers describe (pyribs
adds a generation's samples as one batch, each judged against the archive before it).

The archive keeps the best network of each cell (MAP-Elites' rule), which the QD score,
coverage and the elite report, and from which restarts draw. In the paper's Algorithm 1
CMA-MAE replaces a cell's occupant whenever a sample beats its threshold, so that archive may
hold worse solutions than the best found; pyribs reports the metrics from a second,
best-per-cell result archive and restarts from the first. Here the best-per-cell archive is
the only one, which costs one ``cells x P`` float32 array instead of two.

Every emitter starts from the model's initialisation (the same mean for all); each keeps 3
dense ``[P, P]`` float64 matrices (``emitters * 3 * 8 P^2`` bytes, refused above
``max_memory_gb``), so these methods suit small networks and plain functions. Every sample is
registered with the decoder and shipped as a dense vector.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from neuroevo.algorithms.base import GenerationSummary, PhaseResult, Stream
from neuroevo.algorithms.cma_es import cma_constants, evolution_paths
from neuroevo.algorithms.gaussian import dense_memory_check
from neuroevo.algorithms.map_elites import (
    ELITE_ID,
    GridParams,
    GridSearch,
    GridState,
    insert_elite,
)
from neuroevo.core.params import check
from neuroevo.evaluation.request import EvalRequest, Phase
from neuroevo.genomes.genome import ESGenome

__all__ = [
    "CMAMAE",
    "CMAME",
    "CMAMAEParams",
    "CMAMAEState",
    "CMAMEParams",
    "CMAMEState",
    "emitter_sizes",
]

MAX_CONDITION = 1e14
"""Restart an emitter whose covariance has a larger condition number (pycma's
``tolconditioncov``)."""
MIN_STEP = 1e-11
"""Restart an emitter whose largest step ``sigma * max(D)`` is smaller (pyribs)."""
FLAT_RANKING = 1e-12
"""Restart an emitter whose samples' ranking values all lie this close (pycma's
``tolflatfitness``)."""


@dataclass(frozen=True)
class CMAMEParams(GridParams):
    """CMA-ME hyperparameters (``algorithm.cma_me``).

    Attributes:
        population_size: Samples per generation, over all emitters (split as evenly as
            possible; the papers run 15 emitters of 36 or 37).
        emitters: CMA-ES instances sampling each generation.
        sigma: Every emitter's initial step size, and its step size after a restart.
        max_memory_gb: Refuse a network whose emitters' matrices need more than this.
    """

    population_size: int = 100
    emitters: int = 5
    sigma: float = 0.5
    max_memory_gb: float = 4.0

    def _validate(self) -> None:
        super()._validate()
        check(self.emitters >= 1, "emitters", self.emitters, ">= 1")
        n = self.population_size
        check(
            n >= 2 * self.emitters,
            "population_size",
            n,
            f">= 2 per emitter (emitters: {self.emitters})",
        )
        check(self.sigma > 0, "sigma", self.sigma, "> 0")
        check(self.max_memory_gb > 0, "max_memory_gb", self.max_memory_gb, "> 0")


@dataclass(frozen=True)
class CMAMAEParams(CMAMEParams):
    """CMA-MAE hyperparameters (``algorithm.cma_mae``).

    Attributes:
        archive_learning_rate: alpha, how far a cell's threshold moves towards a sample that
            beats it (the paper: 0.01; 1 gives CMA-ME's archive, 0 plain CMA-ES ranking).
        threshold_min: Every cell's initial threshold (min_f); null means
            ``qd_score_offset``. Set it below the lowest fitness that should count.
    """

    archive_learning_rate: float = 0.01
    threshold_min: float | None = None

    def _validate(self) -> None:
        super()._validate()
        rate = self.archive_learning_rate
        check(0 <= rate <= 1, "archive_learning_rate", rate, "in [0, 1]")
        low = self.threshold_min
        check(low is None or math.isfinite(low), "threshold_min", low, "finite (or null)")


@dataclass(frozen=True, eq=False, kw_only=True)
class CMAMEState(GridState):
    """The archive and the emitters (one row per emitter).

    Attributes:
        means: float64 [E, P], each emitter's mean m.
        sigmas: float64 [E], step sizes.
        p_sigma: float64 [E, P], conjugate evolution paths.
        p_c: float64 [E, P], evolution paths of the covariances.
        cov: float64 [E, P, P], C.
        basis: float64 [E, P, P], B at each emitter's last eigendecomposition.
        scales: float64 [E, P], D (square roots of C's eigenvalues then).
        updates: int64 [E], updates since each emitter's last (re)start.
        eigen_updates: int64 [E], ``updates`` at its last eigendecomposition.
        restarts: int64 [E], restarts so far.
    """

    means: np.ndarray
    sigmas: np.ndarray
    p_sigma: np.ndarray
    p_c: np.ndarray
    cov: np.ndarray
    basis: np.ndarray
    scales: np.ndarray
    updates: np.ndarray
    eigen_updates: np.ndarray
    restarts: np.ndarray


@dataclass(frozen=True, eq=False, kw_only=True)
class CMAMAEState(CMAMEState):
    """CMA-MAE's State.

    Attributes:
        thresholds: float64 [cells], each cell's acceptance threshold t_e.
    """

    thresholds: np.ndarray


class _Paths(NamedTuple):
    """One emitter's step size and paths, as :func:`evolution_paths` reads them."""

    sigma: float
    p_sigma: np.ndarray
    p_c: np.ndarray


def emitter_sizes(population: int, emitters: int) -> np.ndarray:
    """int64 [E], each emitter's samples: ``population`` split as evenly as possible, the
    first emitters taking one more."""
    sizes = np.full(emitters, population // emitters, np.int64)
    sizes[: population % emitters] += 1
    return sizes


class CMAME(GridSearch):
    """CMA-ME with improvement emitters (Fontaine et al. 2020); see the module docstring."""

    name = "cma_me"
    params_class = CMAMEParams
    state_class: type[CMAMEState] = CMAMEState
    archive_fields: tuple[str, ...] = ("fitness", "behaviors", "elites")
    """The State arrays that inserting a sample changes."""
    _params: CMAMEParams
    _state: CMAMEState

    def _init_state(self) -> CMAMEState:
        params, n = self._params, self._num_params
        dense_memory_check(self.name, n, 3 * params.emitters, params.max_memory_gb)
        self._constants: dict[tuple[int, int | None], dict[str, Any]] = {}
        index = self._noise.sample_index(self._rng(0, Stream.INIT), n)
        start = (self._decoder.scales * self._noise.get(index, n)).astype(np.float64)
        e = params.emitters
        state = self.state_class(
            generation=0,
            phase=Phase.POPULATION,
            **self._empty_archive(),
            **self._extra_fields(),
            means=np.tile(start, (e, 1)),
            sigmas=np.full(e, params.sigma),
            p_sigma=np.zeros((e, n)),
            p_c=np.zeros((e, n)),
            cov=np.tile(np.eye(n), (e, 1, 1)),
            basis=np.tile(np.eye(n), (e, 1, 1)),
            scales=np.ones((e, n)),
            updates=np.zeros(e, np.int64),
            eigen_updates=np.zeros(e, np.int64),
            restarts=np.zeros(e, np.int64),
        )
        return state

    def _extra_fields(self) -> dict[str, Any]:
        """State fields of a subclass at generation 0."""
        return {}

    def _z(self, generation: int) -> np.ndarray:
        """float64 [n, P], the standard normal draws of ``generation``'s samples."""
        rng = self._rng(generation, Stream.MUTATION)
        return rng.standard_normal((self._params.population_size, self._num_params))

    def _rows(self) -> list[slice]:
        """Each emitter's rows of the population."""
        sizes = emitter_sizes(self._params.population_size, self._params.emitters)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        return [slice(int(a), int(b)) for a, b in itertools.pairwise(bounds.tolist())]

    def _ask(self) -> EvalRequest:
        state, params = self._state, self._params
        n = params.population_size
        z = self._z(state.generation)
        first = ELITE_ID + 1 + state.generation * n
        for e, rows in enumerate(self._rows()):
            samples = state.means[e] + state.sigmas[e] * (z[rows] * state.scales[e]) @ (
                state.basis[e].T
            )
            for k, sample in zip(range(rows.start, rows.stop), samples, strict=True):
                self._decoder.set_center(first + k, sample, keep=n + 1)
        genomes = tuple(ESGenome(first + k, 0, 0, 0.0) for k in range(n))
        return self._request_for(genomes, params.population_episodes, Phase.POPULATION)

    def _tell(self, state: CMAMEState, result: PhaseResult) -> tuple[CMAMEState, GenerationSummary]:
        cells = self._cells_of(result)
        weights = self._decoder.decode_batch(self.ask().genomes)
        copies = {name: getattr(state, name).copy() for name in self.archive_fields}
        archive = dataclasses.replace(state, **copies)
        assert result.behavior is not None
        values = np.full(len(cells), np.nan)
        added = np.zeros(len(cells), np.int64)
        insertions = 0
        for k, cell in enumerate(cells.tolist()):
            if not np.isfinite(result.raw[k]):  # never inserted, ranked last (below)
                continue
            values[k], added[k] = self._improvement(archive, cell, result.raw[k])
            insertions += insert_elite(archive, cell, result.raw[k], result.behavior[k], weights[k])
        values[np.isnan(values)] = np.nanmin(values) - 1
        emitters = self._update_emitters(archive, self._z(state.generation), values, added)
        next_state = dataclasses.replace(archive, generation=state.generation + 1, **emitters)
        self._register(next_state)
        restarts = int(np.sum(next_state.restarts - state.restarts))
        extras = self._archive_extras(next_state, insertions) | {"restarts": float(restarts)}
        summary = result.summary(state.generation, float(np.mean(state.sigmas)), extras)
        return next_state, dataclasses.replace(summary, elite_score=self._best_score(next_state))

    def _improvement(self, archive: CMAMEState, cell: int, value: float) -> tuple[float, int]:
        """CMA-ME's two-stage ranking: (ranking value, rank class) of a sample of fitness
        ``value`` entering ``cell`` of ``archive`` (before its insertion): 2 and the fitness
        for a new cell, 1 and the improvement for a better elite, 0 (dropped) otherwise."""
        current = archive.fitness[cell]
        if np.isnan(current):
            return value, 2
        return value - current, int(value > current)

    def _parents(self, values: np.ndarray, added: np.ndarray) -> np.ndarray:
        """Indices (within an emitter's samples) of its parents, best first: CMA-ME's added
        samples, new cells before improved ones, each by ranking value."""
        order = np.lexsort((-values, -added))
        return order[added[order] > 0]

    def _weights(self, size: int, parents: int) -> dict[str, Any]:
        """The CMA constants of an emitter of ``size`` samples recombining ``parents``."""
        key = (size, parents)
        if key not in self._constants:
            self._constants[key] = cma_constants(self._num_params, size, parents=parents)
        return self._constants[key]

    def _update_emitters(
        self, archive: CMAMEState, z: np.ndarray, values: np.ndarray, added: np.ndarray
    ) -> dict[str, np.ndarray]:
        """The emitters' State fields after each took its CMA-ES step (or restarted)."""
        fields = ("means", "sigmas", "p_sigma", "p_c", "cov", "basis", "scales")
        fields += ("updates", "eigen_updates", "restarts")
        new = {name: getattr(archive, name).copy() for name in fields}
        rng = self._rng(archive.generation, Stream.SELECTION)
        for e, rows in enumerate(self._rows()):
            parents = self._parents(values[rows], added[rows])
            if parents.size:
                self._cma_step(new, e, z[rows][parents], rows.stop - rows.start)
            spread = np.ptp(values[rows])  # an emitter has at least 2 samples
            condition = (new["scales"][e].max() / new["scales"][e].min()) ** 2
            if (
                parents.size == 0
                or condition > MAX_CONDITION
                or new["sigmas"][e] * new["scales"][e].max() < MIN_STEP
                or spread < FLAT_RANKING
            ):
                self._restart(new, e, archive, rng)
        return new

    def _cma_step(self, new: dict[str, np.ndarray], e: int, z: np.ndarray, size: int) -> None:
        """Emitter ``e``'s CMA-ES update, in place on ``new``, from the standard normal draws
        ``z`` [mu, P] of its parents, best first (as CMAES._update, with mu parents)."""
        k = self._weights(size, len(z))
        n = self._num_params
        basis, scales, sigma = new["basis"][e], new["scales"][e], float(new["sigmas"][e])
        y = (z * scales) @ basis.T  # (x - m) / sigma of the parents
        y_w = k["weights"] @ y
        z_w = k["weights"] @ z
        paths = _Paths(sigma, new["p_sigma"][e], new["p_c"][e])
        updates = int(new["updates"][e])
        changes, _, delta = evolution_paths(k, paths, basis @ z_w, y_w, updates, n)
        c_1, c_mu, p_c = k["c_1"], k["c_mu"], changes["p_c"]
        cov = (1 + c_1 * delta - c_1 - c_mu) * new["cov"][e]
        cov += c_1 * np.outer(p_c, p_c) + c_mu * (y.T * k["weights"]) @ y
        new["means"][e] += sigma * y_w
        new["sigmas"][e] = changes["sigma"]
        new["p_sigma"][e], new["p_c"][e], new["cov"][e] = changes["p_sigma"], p_c, cov
        new["updates"][e] = updates + 1
        if updates + 1 - new["eigen_updates"][e] >= max(1, int(1 / (10 * n * (c_1 + c_mu)))):
            cov = (cov + cov.T) / 2
            eigenvalues, basis = np.linalg.eigh(cov)
            new["cov"][e], new["basis"][e] = cov, basis
            new["scales"][e] = np.sqrt(np.maximum(eigenvalues, 1e-300))
            new["eigen_updates"][e] = updates + 1

    def _restart(
        self, new: dict[str, np.ndarray], e: int, archive: CMAMEState, rng: np.random.Generator
    ) -> None:
        """Emitter ``e`` starts again, in place on ``new``, from an elite drawn uniformly."""
        filled = np.flatnonzero(~np.isnan(archive.fitness))
        assert filled.size, "a told generation always fills a cell"
        n = self._num_params
        new["means"][e] = archive.elites[rng.choice(filled)]
        new["sigmas"][e] = self._params.sigma
        new["p_sigma"][e], new["p_c"][e] = np.zeros(n), np.zeros(n)
        new["cov"][e], new["basis"][e], new["scales"][e] = np.eye(n), np.eye(n), np.ones(n)
        new["updates"][e] = new["eigen_updates"][e] = 0
        new["restarts"][e] += 1


class CMAMAE(CMAME):
    """CMA-MAE (Fontaine & Nikolaidis 2023); see the module docstring."""

    name = "cma_mae"
    params_class = CMAMAEParams
    state_class = CMAMAEState
    archive_fields = (*CMAME.archive_fields, "thresholds")
    _params: CMAMAEParams
    _state: CMAMAEState

    def _extra_fields(self) -> dict[str, Any]:
        params = self._params
        low = params.qd_score_offset if params.threshold_min is None else params.threshold_min
        return {"thresholds": np.full(int(np.prod(params.cells)), float(low))}

    def _improvement(self, archive: CMAMEState, cell: int, value: float) -> tuple[float, int]:
        """``f - t_e`` and whether it is positive; a positive one anneals ``t_e`` (in place)."""
        assert isinstance(archive, CMAMAEState)
        threshold = archive.thresholds[cell]
        if value <= threshold:
            return value - threshold, 0
        alpha = self._params.archive_learning_rate
        archive.thresholds[cell] = (1 - alpha) * threshold + alpha * value
        return value - threshold, 1

    def _parents(self, values: np.ndarray, added: np.ndarray) -> np.ndarray:
        """The best half by improvement, whether or not they beat their thresholds."""
        return np.argsort(-values, kind="stable")[: len(values) // 2]

    def _weights(self, size: int, parents: int) -> dict[str, Any]:
        """The tutorial's constants: the best ``size // 2`` with ``ln((size + 1)/2) - ln i``."""
        key = (size, None)
        if key not in self._constants:
            self._constants[key] = cma_constants(self._num_params, size)
        return self._constants[key]
