"""MAP-Elites (Mouret & Clune 2015, "Illuminating search spaces by mapping elites",
arXiv:1504.04909), with the iso-line variation of Vassiliades & Mouret 2018 ("Discovering the
Elite Hypervolume by Leveraging Interspecies Correlation", GECCO) as an option.

The behaviour space (the episode's behaviour characterisation, e.g. the maze robot's final
(x, y), averaged over a genome's episodes) is cut into a grid of ``cells`` between
``behavior_low`` and ``behavior_high`` (behaviours outside fall into the border cells). Each
cell keeps its elite: the best genome whose behaviour fell into it. Generation 0 evaluates
``population_size`` random networks; every later generation evaluates ``population_size``
children of elites drawn uniformly from the filled cells:

    child = x_i + mutation_sigma * eps                                (Gaussian mutation)
    child = x_i + mutation_sigma * eps + line_sigma * N(0, 1) * (x_j - x_i)   (iso-line)

and inserts each, in order, where its cell is empty or holds a worse elite. Logged per
generation: ``coverage`` (share of cells filled), ``qd_score`` (sum over filled cells of
``fitness - qd_score_offset``), ``archive_best``, ``filled`` and ``insertions``.

The archive is dense (float32 [cells, P] elites), checkpointed whole. A child's base vector
(its parent, or the iso-line mix of two elites) is registered with the decoder and the genome
is that base plus ``mutation_sigma * eps``: one float32 [P] vector per child goes to remote
nodes each generation. The elite is the best cell's network.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from neuroevo.algorithms.base import (
    GenerationSummary,
    Optimizer,
    PhaseResult,
    PopulationParams,
    Stream,
)
from neuroevo.core.params import check
from neuroevo.evaluation.request import EvalRequest, Phase
from neuroevo.genomes.genome import ESGenome, GAGenome, Genome

__all__ = [
    "GridArchive",
    "GridParams",
    "GridSearch",
    "GridState",
    "MAPElites",
    "MAPElitesParams",
    "MAPElitesState",
    "grid_cells",
    "insert_elite",
]

ELITE_ID = 0
"""Decoder id of the best cell's network."""


@dataclass(frozen=True)
class GridParams(PopulationParams):
    """What every strategy on the grid archive shares (MAP-Elites, CMA-ME, CMA-MAE).

    Attributes:
        cells: Grid cells along each behaviour dimension.
        behavior_low: Lower edge of the grid, one per dimension.
        behavior_high: Upper edge of the grid, one per dimension.
        qd_score_offset: Subtracted from every elite's fitness in the QD score (set it below
            the lowest possible fitness so the score grows with coverage).
    """

    needs_behavior = True

    cells: tuple[int, ...] = (10, 10)
    behavior_low: tuple[float, ...] = (0.0, 0.0)
    behavior_high: tuple[float, ...] = (1.0, 1.0)
    qd_score_offset: float = 0.0

    def _validate(self) -> None:
        self._validate_population()
        self._validate_grid()

    def _validate_grid(self) -> None:
        dims = len(self.cells)
        check(dims >= 1, "cells", list(self.cells), "one count per behaviour dimension")
        check(all(c >= 1 for c in self.cells), "cells", list(self.cells), "all >= 1")
        for name in ("behavior_low", "behavior_high"):
            value = getattr(self, name)
            check(len(value) == dims, name, list(value), f"{dims} values (one per cell count)")
        check(
            all(lo < hi for lo, hi in zip(self.behavior_low, self.behavior_high, strict=True)),
            "behavior_high",
            list(self.behavior_high),
            f"above behavior_low {list(self.behavior_low)} in every dimension",
        )

    def check_behavior_values(self, values: int) -> None:
        """The grid has one dimension per behaviour value."""
        check(
            len(self.cells) == values,
            "cells",
            list(self.cells),
            f"one count per behaviour value: the behaviours have {values} (set cells, "
            "behavior_low and behavior_high to that many values; the maze's behavior.kind "
            "final gives 2, its (x, y))",
        )


@dataclass(frozen=True)
class MAPElitesParams(GridParams):
    """MAP-Elites hyperparameters (``algorithm.map_elites``).

    Attributes:
        population_size: Genomes per generation (random ones in generation 0, then children).
        cells: Grid cells along each behaviour dimension.
        behavior_low: Lower edge of the grid, one per dimension.
        behavior_high: Upper edge of the grid, one per dimension.
        mutation_sigma: Std of the Gaussian mutation (the iso-line's sigma_iso).
        line_sigma: Std of the step along the line to a second elite; 0 turns iso-line
            variation off (Vassiliades & Mouret use 0.2 with sigma_iso 0.01).
        qd_score_offset: Subtracted from every elite's fitness in the QD score (set it below
            the lowest possible fitness so the score grows with coverage).
    """

    population_size: int = 100
    mutation_sigma: float = 0.05
    line_sigma: float = 0.0

    def _validate(self) -> None:
        super()._validate()
        check(self.mutation_sigma > 0, "mutation_sigma", self.mutation_sigma, "> 0")
        check(self.line_sigma >= 0, "line_sigma", self.line_sigma, ">= 0 (0: no iso-line)")


@dataclass(frozen=True, eq=False, kw_only=True)
class GridState:
    """The grid archive, as every grid strategy's State holds it.

    Attributes:
        generation: Current generation.
        phase: Always the population phase.
        fitness: float64 [cells], each cell's elite fitness, NaN where empty.
        behaviors: float64 [cells, d], each elite's behaviour (NaN where empty).
        elites: float32 [cells, P], each cell's elite network (zeros where empty).
        pending: Always None (one phase per generation).
    """

    generation: int
    phase: Phase
    fitness: np.ndarray
    behaviors: np.ndarray
    elites: np.ndarray
    pending: GenerationSummary | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class MAPElitesState(GridState):
    """MAP-Elites' State: the archive alone."""


@dataclass(frozen=True, eq=False)
class GridArchive:
    """A copy of a grid archive, for a notebook (``ne.optimize(...).archive``) or a plot.

    Attributes:
        fitness: float64 ``[*cells]``, each cell's elite fitness (maximised), NaN where empty.
        behaviors: float64 ``[*cells, d]``, each elite's behaviour, NaN where empty.
        elites: float32 ``[*cells, P]``, each cell's elite (zeros where empty).
        behavior_low: float64 [d], the grid's lower edges.
        behavior_high: float64 [d], its upper edges.
        qd_score: Sum over filled cells of ``fitness - qd_score_offset``.
        coverage: Share of the cells filled.
    """

    fitness: np.ndarray
    behaviors: np.ndarray
    elites: np.ndarray
    behavior_low: np.ndarray
    behavior_high: np.ndarray
    qd_score: float
    coverage: float


def grid_cells(behaviors: np.ndarray, params: GridParams) -> np.ndarray:
    """int64 [n], the flat grid cell of each behaviour [n, d] (outside: the border cell)."""
    low, high = np.asarray(params.behavior_low), np.asarray(params.behavior_high)
    counts = np.asarray(params.cells)
    position = np.floor((behaviors - low) / (high - low) * counts).astype(np.int64)
    position = np.clip(position, 0, counts - 1)
    return np.ravel_multi_index(tuple(position.T), tuple(params.cells))


def insert_elite(
    state: GridState, cell: int, value: float, behavior: np.ndarray, weights: np.ndarray
) -> bool:
    """MAP-Elites' rule, in place on the (copied) arrays of ``state``: a finite ``value``
    takes ``cell`` when it is empty or holds a worse elite. Returns whether it did."""
    current = state.fitness[cell]
    if not np.isfinite(value) or (not np.isnan(current) and value <= current):
        return False
    state.fitness[cell], state.behaviors[cell], state.elites[cell] = value, behavior, weights
    return True


class GridSearch(Optimizer):
    """Base of the strategies on the grid archive: the elite is the best cell's network
    (decoder id ``ELITE_ID``), the QD metrics are logged the same way, ``archive`` copies
    the grid. A strategy's State extends :class:`GridState`."""

    params_class = GridParams
    _params: GridParams
    _state: GridState

    @property
    def elite(self) -> Genome | None:
        """The best cell's network (None while the archive is empty)."""
        return None if self._best_cell(self._state) is None else ESGenome(ELITE_ID, 0, 0, 0.0)

    @property
    def elite_score(self) -> float | None:
        """The best cell's fitness."""
        return self._best_score(self._state)

    @property
    def archive(self) -> GridArchive:
        """A copy of the archive, shaped as the grid."""
        state, params = self._state, self._params
        cells = tuple(params.cells)
        extras = self._archive_extras(state, 0)
        return GridArchive(
            fitness=state.fitness.reshape(cells).copy(),
            behaviors=state.behaviors.reshape(*cells, -1).copy(),
            elites=state.elites.reshape(*cells, -1).copy(),
            behavior_low=np.array(params.behavior_low, np.float64),
            behavior_high=np.array(params.behavior_high, np.float64),
            qd_score=extras["qd_score"],
            coverage=extras["coverage"],
        )

    @staticmethod
    def _best_cell(state: GridState) -> int | None:
        """The cell of the fittest elite, None while the archive is empty."""
        fitness = state.fitness
        return None if np.all(np.isnan(fitness)) else int(np.nanargmax(fitness))

    @classmethod
    def _best_score(cls, state: GridState) -> float | None:
        """The fittest elite's fitness, None while the archive is empty."""
        cell = cls._best_cell(state)
        return None if cell is None else float(state.fitness[cell])

    def _empty_archive(self) -> dict[str, np.ndarray]:
        """The :class:`GridState` arrays of an empty grid."""
        cells = int(np.prod(self._params.cells))
        return {
            "fitness": np.full(cells, np.nan),
            "behaviors": np.full((cells, len(self._params.cells)), np.nan),
            "elites": np.zeros((cells, self._num_params), np.float32),
        }

    def _cells_of(self, result: PhaseResult) -> np.ndarray:
        """int64 [n], the grid cell of each genome of ``result``.

        Raises:
            ValueError: The behaviours have another number of values than the grid.
        """
        assert result.behavior is not None
        cells = self._params.cells
        if result.behavior.shape[1] != len(cells):
            raise ValueError(
                f"{self.name} has a {len(cells)}-D grid (algorithm.{self.name}.cells) but the "
                f"behaviours have {result.behavior.shape[1]} values; give one cell count and "
                "bounds per behaviour value (behavior.kind final on the maze gives (x, y))"
            )
        return grid_cells(result.behavior, self._params)

    def _archive_extras(self, state: GridState, insertions: int) -> dict[str, float]:
        """The QD metrics a generation logs."""
        fitness = state.fitness
        filled = ~np.isnan(fitness)
        return {
            "coverage": float(filled.mean()),
            "qd_score": float(np.sum(fitness[filled] - self._params.qd_score_offset)),
            "archive_best": float(np.max(fitness[filled])) if filled.any() else float("nan"),
            "filled": float(filled.sum()),
            "insertions": float(insertions),
        }

    def _register(self, state: GridState) -> None:
        best = self._best_cell(state)
        if best is not None:
            self._decoder.set_center(
                ELITE_ID, state.elites[best], keep=self._params.population_size + 1
            )

    def _restored(self, state: GridState) -> None:
        self._register(state)


class MAPElites(GridSearch):
    """MAP-Elites; see the module docstring. Needs per-episode behaviours."""

    name = "map_elites"
    params_class = MAPElitesParams
    _params: MAPElitesParams
    _state: MAPElitesState

    def _init_state(self) -> MAPElitesState:
        return MAPElitesState(generation=0, phase=Phase.POPULATION, **self._empty_archive())

    def _ask(self) -> EvalRequest:
        state, params = self._state, self._params
        n, generation = params.population_size, state.generation
        filled = np.flatnonzero(~np.isnan(state.fitness))
        mutation_rng = self._rng(generation, Stream.MUTATION)
        indices = self._noise.sample_indices(mutation_rng, self._num_params, n)
        if filled.size == 0:
            genomes: tuple[Genome, ...] = tuple(GAGenome(i) for i in indices.tolist())
            return self._request_for(genomes, params.population_episodes, Phase.POPULATION)
        rng = self._rng(generation, Stream.SELECTION)
        parents = state.elites[rng.choice(filled, size=n)]
        if params.line_sigma > 0:
            partners = state.elites[rng.choice(filled, size=n)]
            steps = params.line_sigma * rng.standard_normal(n)[:, None]
            parents = (parents + steps * (partners.astype(np.float64) - parents)).astype(np.float32)
        first = ELITE_ID + 1 + generation * n
        for k, base in enumerate(parents):
            self._decoder.set_center(first + k, base, keep=n + 1)
        genomes = tuple(
            ESGenome(first + k, index, 1, params.mutation_sigma)
            for k, index in enumerate(indices.tolist())
        )
        return self._request_for(genomes, params.population_episodes, Phase.POPULATION)

    def _tell(
        self, state: MAPElitesState, result: PhaseResult
    ) -> tuple[MAPElitesState, GenerationSummary]:
        cells = self._cells_of(result)
        weights = self._decoder.decode_batch(self.ask().genomes)
        next_state = MAPElitesState(
            generation=state.generation + 1,
            phase=Phase.POPULATION,
            fitness=state.fitness.copy(),
            behaviors=state.behaviors.copy(),
            elites=state.elites.copy(),
        )
        insertions = sum(
            insert_elite(next_state, cell, result.raw[k], result.behavior[k], weights[k])
            for k, cell in enumerate(cells.tolist())
        )
        self._register(next_state)
        extras = self._archive_extras(next_state, insertions)
        summary = result.summary(state.generation, self._params.mutation_sigma, extras)
        return next_state, dataclasses.replace(summary, elite_score=self._best_score(next_state))
