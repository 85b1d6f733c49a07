"""The two-call API for notebooks: ``neuroevo.train`` (a config) and ``neuroevo.optimize`` (a
function).

``train`` runs the same ``Trainer`` as ``python -m neuroevo.train``; with ``run_dir=None`` the
run lives in a temporary directory deleted when it returns, and what matters (the
per-generation summaries and the elite) comes back as objects. ``optimize`` runs any
registered optimizer on a function of a float vector, called on the whole population at once
(``batch=True``) and maximised or minimised.

Nothing here imports TensorFlow until ``train`` builds an env and a model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from neuroevo.config import Config, apply_overrides, load_config

if TYPE_CHECKING:
    from neuroevo.algorithms.base import GenerationSummary, Optimizer
    from neuroevo.policy import Policy

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
        from neuroevo.policy import evaluate_elite

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
            from neuroevo.assemble import build_env
            from neuroevo.policy import build_policy

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


def _config(config: str | Path | Config | Mapping[str, Any], overrides: Mapping[str, Any]):
    from neuroevo.config import config_from_dict

    strings = [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    if isinstance(config, Config):
        return apply_overrides(config, strings)
    if isinstance(config, Mapping):
        return apply_overrides(config_from_dict(config), strings)
    return load_config(config, strings)


def train(
    config: str | Path | Config | Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    run_dir: str | Path | None = None,
    *,
    quiet: bool = True,
    callback: Callable[[GenerationSummary], None] | None = None,
) -> TrainResult:
    """Trains a config and returns its summaries and elite.

    Args:
        config: a YAML file, a nested mapping of sections, or a ``Config``.
        overrides: dotted keys to values, e.g. ``{"budget.generations": 5, "seed": 1}``.
        run_dir: a new run directory to keep (config, metrics, checkpoints, elite); None runs
            in a temporary directory removed before returning.
        quiet: no progress bar or summary lines.
        callback: called with each generation's summary.

    Returns:
        A :class:`TrainResult`.

    Raises:
        ValueError: a bad config or override (``ConfigError``), an unusable ``run_dir``, or
            what the trainer refuses (sizes, env, model).
    """
    from neuroevo.policy import load_policy
    from neuroevo.trainer import open_run

    cfg = _config(config, overrides or {})
    summaries: list[GenerationSummary] = []

    def on_generation(summary: GenerationSummary) -> None:
        summaries.append(summary)
        if callback is not None:
            callback(summary)

    with contextlib.ExitStack() as stack:
        path = Path(run_dir) if run_dir is not None else None
        if path is None:
            path = (
                Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="neuroevo-"))) / "run"
            )
        trainer = open_run(cfg, path, quiet=quiet)
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
    """

    x: np.ndarray
    value: float
    summaries: list[GenerationSummary]
    algorithm: Optimizer


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
    **hyperparams: Any,
) -> OptimizeResult:
    """Optimises ``fn`` over float vectors of ``dims`` with a registered algorithm.

    Args:
        fn: with ``batch``, called with float32 ``[n, dims]`` (one row per evaluation of a
            generation) and returning ``[n]`` values; otherwise called with one ``[dims]``
            vector and returning a float. For a novelty algorithm (``ns_es``, ``ga_ns``, ...)
            it returns ``(values, behaviours)``, behaviours ``[n, d]`` (one vector without
            ``batch``). Rows the algorithm evaluates several times (GA validation) appear once
            per evaluation. Arrays are read-only.
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
        **hyperparams: fields of the algorithm's params class, e.g. ``population_size=32``,
            ``sigma=0.1``, ``learning_rate=0.05`` for ES.

    Returns:
        An :class:`OptimizeResult`.

    Raises:
        ValueError: an unknown algorithm or hyperparameter, ``dims`` < 1, ``generations`` < 1,
            or ``fn`` returning values of the wrong shape.
    """
    from neuroevo.algorithms import make_algorithm
    from neuroevo.algorithms.base import Optimizer
    from neuroevo.noise import NoiseTable

    if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
        raise ValueError(f"dims must be a positive integer, got {dims!r}")
    if generations < 1:
        raise ValueError(f"generations must be >= 1, got {generations}")
    if isinstance(algorithm, Optimizer):
        if hyperparams:
            raise ValueError("hyperparameters go with an algorithm name, not a built optimizer")
        if algorithm.num_params != dims:
            raise ValueError(f"the optimizer has {algorithm.num_params} parameters, dims={dims}")
        optimizer = algorithm
    else:
        size = noise_size or max(DEFAULT_NOISE_SIZE, 100 * dims)
        optimizer = make_algorithm(
            algorithm,
            num_params=dims,
            scales=init_std,
            noise=NoiseTable(seed, size=size, cache_dir=False),
            seed=seed,
            **hyperparams,
        )
    sign = -1.0 if minimize else 1.0
    evaluate = _batched(fn, dims, batch, optimizer.needs_behavior)
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
    return OptimizeResult(x, value, summaries, optimizer)


def _batched(
    fn: Callable[[np.ndarray], Any], dims: int, batch: bool, needs_behavior: bool
) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray | None]]:
    """``fn`` as a function of ``[n, dims]`` rows returning float64 ``[n]`` values and, for
    novelty search, ``[n, d]`` behaviours; wrong shapes raise ``ValueError``."""

    def call(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        if batch:
            out = fn(rows)
            values, behaviors = out if needs_behavior else (out, None)
        else:
            outs = [fn(row) for row in rows]
            if needs_behavior:
                values = [o[0] for o in outs]
                behaviors = np.stack([np.ravel(o[1]) for o in outs])
            else:
                values, behaviors = outs, None
        values = np.asarray(values, np.float64).reshape(-1)
        if values.shape != (rows.shape[0],):
            raise ValueError(
                f"fn returned {np.shape(values)} values for {rows.shape[0]} rows of {dims}; it "
                "must return one value per row"
            )
        if behaviors is not None:
            behaviors = np.asarray(behaviors, np.float64).reshape(rows.shape[0], -1)
        return values, behaviors

    return call
