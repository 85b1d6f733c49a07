"""The two-call API for notebooks: ``neuroevo.train`` (a config) and ``neuroevo.optimize`` (a
function).

``train`` runs the same ``Trainer`` as ``python -m neuroevo.train``; with ``run_dir=None`` the
run lives in a temporary directory deleted when it returns, and what matters (the
per-generation summaries and the elite) comes back as objects. ``optimize`` runs any
registered optimizer on a function of a float vector, called on the whole population at once
(``batch=True``) and maximised or minimised; with ``measures`` and ``archive`` it runs quality
diversity (MAP-Elites, CMA-ME, CMA-MAE) and returns the archive.

Nothing here imports TensorFlow until ``train`` builds an env and a model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from neuroevo.config.overrides import Overrides, merge_overrides
from neuroevo.config.schema import Config, apply_overrides, load_config

if TYPE_CHECKING:
    from neuroevo.algorithms.base import GenerationSummary, Optimizer
    from neuroevo.algorithms.map_elites import GridArchive
    from neuroevo.run.policy import Policy

__all__ = ["ElitePolicy", "OptimizeResult", "TrainResult", "optimize", "train"]

DEFAULT_NOISE_SIZE = 2_000_000
"""Floats in the noise table ``optimize`` makes (8 MB, generated in memory in milliseconds)."""


class ElitePolicy:
    """A trained elite that can act step by step and play whole episodes in its env.

    Attributes:
        config: the run's config (env, model).
        weights: float32 ``[num_params]``, the elite's flat weights.
    """

    def __init__(self, config: Config, policy: Policy):
        self.config = config
        self._policy = policy
        self._env = self._model = None

    @property
    def weights(self) -> np.ndarray:
        return self._policy.weights

    def play(self, episodes: int = 1, seed: int = 0) -> np.ndarray:
        """float64 ``[episodes]``: the returns of episodes on seeds ``seed, seed + 1, ...``,
        run by the evaluator exactly as training scored them."""
        from neuroevo.run.policy import evaluate_elite

        if episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {episodes}")
        return evaluate_elite(self.config, self._policy, np.arange(seed, seed + episodes))

    def act(self, observation: Any) -> np.ndarray:
        """The action for one observation (``observation_spec.shape``); a recurrent policy
        advances its state, which ``reset`` clears at an episode's start."""
        model = self._built()
        obs = np.asarray(observation, model.observation_spec.dtype.as_numpy_dtype)[None]
        return model.act([0], obs).numpy()[0]

    def reset(self) -> None:
        """Starts a new episode: clears a recurrent policy's state."""
        self._built().reset_state([0])

    def _built(self) -> Any:
        if self._model is None:
            from neuroevo.run.build import build_env
            from neuroevo.run.policy import build_policy

            env = build_env(self.config, num_slots=1)
            try:
                model = build_policy(self.config, env, self._policy)
            finally:
                env.close()
            model.load([0], self._policy.weights[None, :])
            self._model = model
        return self._model

    def __repr__(self) -> str:
        return f"ElitePolicy({self.config.model.name}, {self.weights.size} weights)"


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What ``train`` returns.

    Attributes:
        summaries: one ``GenerationSummary`` per generation run, in order.
        policy: the final elite.
        config: the resolved config.
        run_dir: where the run was written, or None for a temporary (deleted) run.
    """

    summaries: list[GenerationSummary]
    policy: ElitePolicy
    config: Config
    run_dir: Path | None


def _config(config: str | os.PathLike[str] | Config | Mapping[str, Any], overrides: Overrides):
    """The validated config ``train`` runs: a file, a mapping of sections or a ``Config``,
    with ``overrides`` (values taken as they are, never re-encoded)."""
    from neuroevo.config.schema import config_from_dict

    if isinstance(config, Config):
        return apply_overrides(config, overrides)
    if isinstance(config, Mapping):  # merged first, as for a file: overrides may complete it
        return config_from_dict(merge_overrides(config, overrides))
    if isinstance(config, str | bytes | os.PathLike):
        return load_config(os.fsdecode(config), overrides)
    raise TypeError(
        f"config must be a YAML file path, a mapping of sections or a Config, got "
        f"{type(config).__name__} {config!r}"
    )


def train(
    config: str | os.PathLike[str] | Config | Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    run_dir: str | bytes | os.PathLike[str] | None = None,
    *,
    quiet: bool = True,
    callback: Callable[[GenerationSummary], None] | None = None,
) -> TrainResult:
    """Trains a config and returns its summaries and elite.

    Args:
        config: a YAML file, a nested mapping of sections, or a ``Config``.
        overrides: dotted keys to values, e.g. ``{"budget.generations": 5, "seed": 1}``;
            numpy scalars and arrays, tuples and paths are taken as the numbers, lists and
            strings they hold.
        run_dir: a new run directory to keep (config, metrics, checkpoints, elite); None runs
            in a temporary directory removed before returning.
        quiet: no progress bar or summary lines.
        callback: called with each generation's summary.

    Returns:
        A :class:`TrainResult`.

    Raises:
        ValueError: a bad config or override (``ConfigError``), an unusable ``run_dir``, or
            what the trainer refuses (sizes, env, model).
        TypeError: ``config`` or ``run_dir`` of a type that is none of the above.
    """
    from neuroevo.run.plan import plan
    from neuroevo.run.policy import load_policy
    from neuroevo.run.trainer import open_run

    cfg = _config(config, {} if overrides is None else overrides)
    summaries: list[GenerationSummary] = []

    def on_generation(summary: GenerationSummary) -> None:
        summaries.append(summary)
        if callback is not None:
            callback(summary)

    if run_dir is not None and not isinstance(run_dir, str | bytes | os.PathLike):
        raise TypeError(f"run_dir must be a path or None, got {type(run_dir).__name__}")
    with contextlib.ExitStack() as stack:
        path = Path(os.fsdecode(run_dir)) if run_dir is not None else None
        if path is None:
            path = (
                Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="neuroevo-"))) / "run"
            )
        trainer = open_run(plan(cfg, path), quiet=quiet)
        trainer.train(on_generation)
        _, policy = load_policy(trainer.run)
    return TrainResult(summaries, ElitePolicy(cfg, policy), cfg, None if run_dir is None else path)


@dataclasses.dataclass(frozen=True)
class OptimizeResult:
    """What ``optimize`` returns.

    Attributes:
        x: float32 ``[dims]``, the final elite (GA, random search) or centre (ES family).
        value: ``fn(x)``, in the function's own sign.
        summaries: one ``GenerationSummary`` per generation; their scores are of the maximised
            objective (``-fn`` when minimising).
        algorithm: the optimizer, to continue with ``optimize(..., algorithm=result.algorithm)``
            or to checkpoint (``state_dict``).
        archive: for a grid algorithm (``map_elites``, ``cma_me``, ``cma_mae``), a copy of its
            archive with ``qd_score`` and ``coverage`` (fitness as maximised: ``-fn`` when
            minimising); else None.
    """

    x: np.ndarray
    value: float
    summaries: list[GenerationSummary]
    algorithm: Optimizer
    archive: GridArchive | None = None


def optimize(
    fn: Callable[[np.ndarray], Any],
    dims: int,
    algorithm: str | Optimizer = "es",
    *,
    minimize: bool = False,
    batch: bool = True,
    generations: int = 100,
    init_std: float | np.ndarray = 1.0,
    seed: int = 0,
    noise_size: int | None = None,
    callback: Callable[[GenerationSummary], None] | None = None,
    measures: Callable[[np.ndarray], Any] | None = None,
    archive: Mapping[str, Any] | None = None,
    **hyperparams: Any,
) -> OptimizeResult:
    """Optimises ``fn`` over float vectors of ``dims`` with a registered algorithm.

    Args:
        fn: with ``batch``, called with float32 ``[n, dims]`` (one row per evaluation of a
            generation) and returning ``[n]`` values; otherwise called with one ``[dims]``
            vector and returning a float. For a novelty algorithm (``ns_es``, ``ga_ns``, ...)
            it returns ``(values, behaviours)``, behaviours ``[n, d]`` (one vector without
            ``batch``). Rows the algorithm evaluates several times (GA validation) appear once
            per evaluation. Arrays are read-only. With ``measures``, ``fn`` returns values only.
        dims: length of the vectors.
        algorithm: a name in ``neuroevo.algorithms.ALGORITHMS`` (``"es"``, ``"ga"``, ...), or
            an optimizer built earlier (its ``num_params`` must be ``dims``).
        minimize: minimise ``fn`` (the algorithm maximises ``-fn``).
        batch: call ``fn`` once per generation phase with all rows (see ``fn``).
        generations: generations to run.
        init_std: std of the initial vectors around 0 (a float or ``[dims]``).
        seed: seeds the noise table and the algorithm, so a run replays exactly.
        noise_size: floats in the noise table (default ``max(2M, 100 * dims)``).
        callback: called with each generation's summary.
        measures: for an algorithm that needs behaviours, the function of the same rows
            (batched as ``fn``) returning their behaviours (quality diversity's measures),
            float ``[n, d]`` (or ``[d]`` without ``batch``).
        archive: for a grid algorithm, its grid: ``{"dims": [cells per measure, ...],
            "ranges": [[low, high] per measure]}`` (the hyperparameters ``cells``,
            ``behavior_low`` and ``behavior_high``).
        **hyperparams: fields of the algorithm's params class, e.g. ``population_size=32``,
            ``sigma=0.1``, ``learning_rate=0.05`` for ES.

    Returns:
        An :class:`OptimizeResult`.

    Example:
        CMA-MAE on a sphere whose two measures are sums of halves of the vector:

        >>> import neuroevo as ne
        >>> result = ne.optimize(
        ...     lambda x: -(x**2).sum(axis=1), 4, "cma_mae", generations=20,
        ...     measures=lambda x: np.stack([x[:, :2].sum(1), x[:, 2:].sum(1)], axis=1),
        ...     archive={"dims": [10, 10], "ranges": [[-2, 2], [-2, 2]]},
        ...     population_size=20, emitters=2, qd_score_offset=-100,
        ... )
        >>> result.archive.fitness.shape, 0 < result.archive.coverage <= 1
        ((10, 10), True)

    Raises:
        ValueError: an unknown algorithm or hyperparameter, ``dims`` or ``generations`` not a
            positive integer, a generation that does not fit memory (checked before anything
            is allocated), ``fn`` or ``measures`` returning values of the wrong shape or type
            (complex or not numbers; only values where the algorithm needs behaviours too),
            ``measures`` for an algorithm without behaviours, or an ``archive`` that is not a
            grid of the algorithm.
    """
    from neuroevo.algorithms import algorithm_params, make_algorithm
    from neuroevo.algorithms.base import Optimizer
    from neuroevo.algorithms.map_elites import GridSearch
    from neuroevo.genomes.noise import NoiseTable

    for name, value in (("dims", dims), ("generations", generations)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    dims, generations = int(dims), int(generations)
    if archive is not None:
        hyperparams |= _grid(archive, algorithm, hyperparams)
    if isinstance(algorithm, Optimizer):
        if hyperparams:
            raise ValueError(
                "hyperparameters and archive= go with an algorithm name, not a built optimizer"
            )
        if algorithm.num_params != dims:
            raise ValueError(f"the optimizer has {algorithm.num_params} parameters, dims={dims}")
        _check_generation_fits(algorithm.params, dims)
        optimizer = algorithm
    else:
        _check_generation_fits(algorithm_params(algorithm, **hyperparams), dims)
        size = noise_size or max(DEFAULT_NOISE_SIZE, 100 * dims)
        optimizer = make_algorithm(
            algorithm,
            num_params=dims,
            scales=init_std,
            noise=NoiseTable(seed, size=size, cache_dir=False),
            seed=seed,
            **hyperparams,
        )
    if measures is not None and not optimizer.needs_behavior:
        raise ValueError(
            f"measures= goes with an algorithm that needs behaviours (map_elites, cma_me, "
            f"cma_mae, the novelty family), not {type(optimizer).__name__}"
        )
    sign = -1.0 if minimize else 1.0
    evaluate = _batched(fn, dims, batch, optimizer, measures)
    summaries: list[GenerationSummary] = []
    while len(summaries) < generations:
        request = optimizer.ask()
        weights = optimizer.decoder.decode_batch(request.genomes)
        rows = np.repeat(weights, request.episodes_per_genome, axis=0)
        rows.flags.writeable = False
        values, behaviors = evaluate(rows)
        returns = sign * values.reshape(request.episode_seeds.shape)
        if behaviors is not None:
            behaviors = behaviors.reshape(*returns.shape, -1)
        summary = optimizer.tell(
            request, returns, sign_returns=np.sign(returns), behaviors=behaviors
        )
        if summary is not None:
            summaries.append(summary)
            if callback is not None:
                callback(summary)
    x = optimizer.decoder.decode(optimizer.elite)
    value = float(evaluate(x[None, :])[0][0])
    grid = optimizer.archive if isinstance(optimizer, GridSearch) else None
    return OptimizeResult(x, value, summaries, optimizer, grid)


def _grid(archive: Mapping[str, Any], algorithm: Any, hyperparams: Mapping[str, Any]) -> dict:
    """The grid hyperparameters (``cells``, ``behavior_low``, ``behavior_high``) of
    ``optimize``'s ``archive``.

    Raises:
        ValueError: ``archive`` lacks or adds keys, its ranges are not ``[low, high]`` pairs,
            the grid is also given as hyperparameters, or ``algorithm`` has no grid.
    """
    from neuroevo.algorithms import ALGORITHMS
    from neuroevo.algorithms.map_elites import GridParams

    if (
        isinstance(algorithm, str)
        and algorithm in ALGORITHMS
        and not issubclass(ALGORITHMS[algorithm].params_class, GridParams)
    ):
        raise ValueError(
            f"archive= goes with a grid algorithm (map_elites, cma_me, cma_mae), not {algorithm!r}"
        )
    if not isinstance(archive, Mapping) or set(archive) != {"dims", "ranges"}:
        raise ValueError(
            'archive must be {"dims": [cells per measure], "ranges": [[low, high] per measure]},'
            f" got {archive!r}"
        )
    ranges = [tuple(pair) for pair in archive["ranges"]]
    if any(len(pair) != 2 for pair in ranges):
        raise ValueError(f"archive ranges must be [low, high] pairs, got {archive['ranges']!r}")
    given = {"cells", "behavior_low", "behavior_high"} & set(hyperparams)
    if given:
        raise ValueError(f"give the grid once: archive= or {', '.join(sorted(given))}, not both")
    return {
        "cells": list(archive["dims"]),
        "behavior_low": [low for low, _ in ranges],
        "behavior_high": [high for _, high in ranges],
    }


def _check_generation_fits(params: Any, dims: int) -> None:
    """Refuses, before the optimizer allocates anything, a generation whose rows (float32
    ``[evaluations, dims]``, decoded then repeated per episode) and bookkeeping do not fit
    memory.

    Raises:
        ValueError: naming the evaluations, the memory needed and available.
    """
    from neuroevo.core.resources import check_memory
    from neuroevo.run.preflight import BYTES_PER_EVALUATION

    evaluations = params.population_size * params.population_episodes
    check_memory(
        evaluations * (BYTES_PER_EVALUATION + 8 * dims),
        f"a generation of {evaluations:,} evaluations of {dims:,} values",
        "lower population_size",
    )


def _real(values: Any, what: str) -> np.ndarray:
    """``values`` as float64; complex numbers (whose imaginary part would be dropped) and
    values that are not numbers raise ``ValueError`` naming ``what``."""
    array = np.asarray(values)
    if np.iscomplexobj(array):
        raise ValueError(f"fn returned complex {what}; return real numbers")
    try:
        return array.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"fn returned {what} that are not numbers: {array.dtype}") from None


def _pair(out: Any, name: str) -> tuple[Any, Any]:
    """A novelty or quality-diversity ``fn``'s ``(values, behaviours)``."""
    if not isinstance(out, tuple | list) or len(out) != 2:
        raise ValueError(
            f"fn returned {type(out).__name__}, but {name} needs behaviours: return "
            "(values, behaviours) (see ne.optimize's fn)"
        )
    return out[0], out[1]


def _batched(
    fn: Callable[[np.ndarray], Any],
    dims: int,
    batch: bool,
    optimizer: Optimizer,
    measures: Callable[[np.ndarray], Any] | None = None,
) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray | None]]:
    """``fn`` as a function of ``[n, dims]`` rows returning float64 ``[n]`` values and, for
    an optimizer that needs behaviours, ``[n, d]`` behaviours (from ``fn``, or from
    ``measures`` when given); wrong shapes or types raise ``ValueError``."""
    needs_behavior = optimizer.needs_behavior and measures is None
    name = type(optimizer).__name__

    def call(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        behaviors = None
        if batch:
            out = fn(rows)
            values, behaviors = _pair(out, name) if needs_behavior else (out, None)
            if measures is not None:
                behaviors = measures(rows)
        else:
            outs = [fn(row) for row in rows]
            if measures is not None:
                values = outs
                behaviors = [np.ravel(_real(measures(row), "measures")) for row in rows]
            elif needs_behavior:
                pairs = [_pair(o, name) for o in outs]
                values = [v for v, _ in pairs]
                behaviors = [np.ravel(_real(b, "behaviours")) for _, b in pairs]
            else:
                values = outs
        values = _real(values, "values").reshape(-1)
        if values.shape != (rows.shape[0],):
            raise ValueError(
                f"fn returned {np.shape(values)} values for {rows.shape[0]} rows of {dims}; it "
                "must return one value per row"
            )
        if behaviors is not None:
            behaviors = _real(np.stack(behaviors) if not batch else behaviors, "behaviours")
            if behaviors.ndim == 0 or len(behaviors) != rows.shape[0]:
                raise ValueError(
                    f"fn or measures returned behaviours of shape {behaviors.shape} for "
                    f"{rows.shape[0]} rows; return one behaviour vector per row"
                )
            behaviors = behaviors.reshape(rows.shape[0], -1)
        return values, behaviors

    return call
