"""``ne.sweep``: a sweep from Python, with the arguments of ``python -m neuroevo.sweep``."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from neuroevo.config.schema import Config, ConfigError
from neuroevo.core.extras import require
from neuroevo.sweeps.engine import SPEC_FILE, SweepSpec, plan_sweep, run_sweep
from neuroevo.sweeps.results import best_table, collect_results, write_results
from neuroevo.sweeps.space import Range, SearchSpace
from neuroevo.sweeps.trial import LINEAGE, LINEAGE_COLUMNS, TIMELINE, TIMELINE_COLUMNS

__all__ = ["SweepResult", "sweep"]


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """What ``sweep`` returns.

    Attributes:
        sweep_dir: the sweep directory (``results.csv``, ``trials/``, ``sweep.json``).
        results: one row per trial, as in ``results.csv``.
        table: the best configurations, mean ± std of the final metric over seeds.
    """

    sweep_dir: Path
    results: list[dict[str, Any]]
    table: str


def sweep(
    config: str | os.PathLike[str] | Config | Mapping[str, Any] | None = None,
    sweep_dir: str | os.PathLike[str] = "sweeps/sweep",
    *,
    grid: Mapping[str, Sequence[Any]] | None = None,
    uniform: Mapping[str, tuple[float, float]] | None = None,
    loguniform: Mapping[str, tuple[float, float]] | None = None,
    samples: int = 1,
    seeds: int = 1,
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    scheduler: str = "fifo",
    metric: str = "test_return",
    trials_in_parallel: int | None = None,
    perturbation_interval: float | None = None,
    address: str | None = None,
    resume: bool = False,
    quiet: bool = True,
) -> SweepResult:
    """Runs a sweep of ``config`` on Ray Tune and returns its results.

    A tiny sweep (two noise stds, two generations each) of ES on CartPole:

    >>> import neuroevo as ne
    >>> small = {"env.kind": "gym", "env.id": "CartPole-v1", "env.max_episode_steps": 20,
    ...          "model.name": "mlp", "model.mlp.hidden_sizes": [4], "algorithm.name": "es",
    ...          "algorithm.es.population_size": 4, "noise.size": 100_000,
    ...          "budget.generations": 2, "logging.tensorboard": False}
    >>> result = ne.sweep({}, tmp / "sweep", overrides=small,
    ...                   grid={"algorithm.es.sigma": [0.02, 0.1]}, trials_in_parallel=2)
    >>> [(r["algorithm.es.sigma"], r["status"], r["generations"]) for r in result.results]
    [(0.02, 'finished', 2), (0.1, 'finished', 2)]

    Args:
        config: the base config: a YAML file, a mapping of sections or a ``Config``.
        sweep_dir: a new directory for the sweep, or the sweep to continue with ``resume``.
        grid: key -> values; every combination is a trial.
        uniform: key -> ``(low, high)`` drawn uniformly by each of ``samples``.
        loguniform: key -> ``(low, high)`` drawn uniformly in the logarithm.
        samples: draws of the ranges (each combined with every grid point).
        seeds: runs of each configuration, on the config's seed and the next ones.
        overrides: dotted keys to values applied to ``config`` first (``--set``).
        scheduler: ``fifo``, ``asha`` or ``pbt``.
        metric: ``test_return`` or ``best_return`` (``neuroevo.sweeps.trial.row_metrics``).
        trials_in_parallel: trials at once (default: one per CPU); each trial's evaluator gets
            its share of the CPUs.
        perturbation_interval: PBT's interval in the budget's unit (default a fifth of it).
        address: a Ray cluster to run the trials on (``auto``, ``host:port``); None starts a
            Ray node for the sweep on this machine.
        resume: continue the sweep in ``sweep_dir`` (give no other sweep arguments).
        quiet: no Tune progress and no printed table.

    Returns:
        A :class:`SweepResult`.

    Raises:
        ValueError: a bad key or value for any trial, a bad option, or a ``sweep_dir`` that
            holds a sweep (without ``resume``) or none (with it); nothing is started then.
    """
    from neuroevo.api import _config

    path = Path(os.fsdecode(sweep_dir))
    if resume:
        given = [config, grid, uniform, loguniform, overrides]
        if any(value is not None for value in given):
            raise ConfigError(f"resuming {path}: give no config or swept keys, it has its own")
        spec = SweepSpec.load(path)
    else:
        if (path / SPEC_FILE).exists():
            raise ConfigError(f"{path} already holds a sweep; continue it with --resume {path}")
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise ConfigError(f"{path} is not an empty directory; choose a new --sweep-dir")
        ranges = {k: Range(*map(float, v)) for k, v in (uniform or {}).items()}
        ranges |= {k: Range(*map(float, v), log=True) for k, v in (loguniform or {}).items()}
        space = SearchSpace(
            {k: list(v) for k, v in (grid or {}).items()}, ranges, samples=samples, seeds=seeds
        )
        spec = plan_sweep(
            _config({} if config is None else config, overrides or {}),
            space,
            scheduler=scheduler,
            metric=metric,
            trials_in_parallel=trials_in_parallel,
            perturbation_interval=perturbation_interval,
            address=address,
        )
        require("sweep", "a sweep")
        spec.save(path)
        (path / TIMELINE).write_text(",".join(TIMELINE_COLUMNS) + "\n")
        if spec.scheduler == "pbt":
            (path / LINEAGE).write_text(",".join(LINEAGE_COLUMNS) + "\n")
    errors = run_sweep(spec, path, resume=resume, quiet=quiet)
    results = collect_results(path, spec.trials, spec.metric, errors)
    written = write_results(path, results)
    table = best_table(results, spec.keys, spec.metric)
    if not quiet:
        print(f"{table}\n\nwrote {written}")
    return SweepResult(path, results, table)
