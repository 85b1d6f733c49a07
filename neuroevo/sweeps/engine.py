"""Ray Tune glue: the plan of a sweep (saved as ``SWEEP/sweep.json``) and running it.

:func:`plan_sweep` does every check before anything starts: each trial's config against the
schema, the scheduler and metric, and the cores (``trials in parallel × evaluator workers``
must fit the CPUs). :func:`run_sweep` starts or joins Ray, runs the trials with a
``Tuner`` (FIFO, ASHA or PBT; Tune's experiment state in ``SWEEP/tune``) and, for a resumed
sweep, ``Tuner.restore``: unfinished trials continue from their checkpoints, finished and
failed ones stay as they are (each trial also keeps its own status file, :mod:`.trial`, so a
trial that finished after Tune's last snapshot is not run again either).

Tune's schedulers measure time in what the budget counts: generations, else frames, else
wall-clock seconds.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from neuroevo.config.schema import Config, ConfigError, config_to_dict
from neuroevo.core.process_state import ProcessChanges, recorded_changes
from neuroevo.sweeps.space import (
    METRICS,
    SCHEDULERS,
    SearchSpace,
    check_ranges,
    trial_configs,
)
from neuroevo.sweeps.trial import TrialSetup, run_trial, trial_name

__all__ = ["SPEC_FILE", "SweepSpec", "available_cpus", "plan_sweep", "run_sweep"]

SPEC_FILE = "sweep.json"
TUNE_DIR = "tune"
PBT_PERTURBATIONS = 5
"""PBT exploits and explores this many times per budget unless told otherwise."""


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """Everything a sweep runs, fixed when it starts and saved with it.

    Attributes:
        base: the base config (file and ``--set`` applied) as a nested mapping.
        grid: swept key -> values (PBT explores among them).
        ranges: swept key -> ``[low, high, log]`` (PBT perturbs within them).
        trials: each trial's overrides, in trial order.
        scheduler: one of ``SCHEDULERS``.
        metric: one of ``METRICS``, maximised.
        trials_in_parallel: trials running at once.
        cpus: the CPUs the trials share.
        perturbation_interval: PBT's interval in the budget's unit.
        address: the Ray cluster to join, or None for a node of this process.
    """

    base: dict[str, Any]
    grid: dict[str, list[Any]]
    ranges: dict[str, list[Any]]
    trials: list[dict[str, Any]]
    scheduler: str
    metric: str
    trials_in_parallel: int
    cpus: float
    perturbation_interval: float | None
    address: str | None

    @property
    def keys(self) -> list[str]:
        """The swept keys, grid first."""
        return [*self.grid, *self.ranges]

    def save(self, sweep_dir: Path) -> None:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        temporary = sweep_dir / f".{SPEC_FILE}.tmp"
        temporary.write_text(json.dumps(dataclasses.asdict(self), indent=1))
        os.replace(temporary, sweep_dir / SPEC_FILE)

    @classmethod
    def load(cls, sweep_dir: Path) -> SweepSpec:
        """Raises ConfigError when ``sweep_dir`` holds no sweep."""
        path = sweep_dir / SPEC_FILE
        if not path.is_file():
            raise ConfigError(f"--resume {sweep_dir}: no sweep there ({path} is missing)")
        return cls(**json.loads(path.read_text()))

    def time_attr(self) -> tuple[str, float]:
        """What Tune's schedulers measure time in, and the budget in that unit."""
        budget = self.base["budget"]
        for key, attr, scale in (
            ("generations", "generation", 1),
            ("frames", "frames", 1),
            ("hours", "wall_time_s", 3600),
        ):
            if budget.get(key) is not None:
                return attr, budget[key] * scale
        raise AssertionError("a validated budget has generations, frames or hours")


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity, as ``taskset`` sets it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def plan_sweep(
    base: Config,
    space: SearchSpace,
    *,
    scheduler: str = "fifo",
    metric: str = "test_return",
    trials_in_parallel: int | None = None,
    perturbation_interval: float | None = None,
    address: str | None = None,
    cpus: float | None = None,
) -> SweepSpec:
    """Checks a sweep and returns its plan; nothing is started or written.

    Args:
        base: the base config.
        space: the swept keys.
        scheduler: one of ``SCHEDULERS``.
        metric: one of ``METRICS``.
        trials_in_parallel: trials at once (default: one per CPU, at most the trials).
        perturbation_interval: PBT only, in the budget's unit (default a fifth of it).
        address: a Ray cluster to join (``auto``, ``host:port``), or None for a local node.
        cpus: the CPUs to share (default: this process's, or the cluster's when joining).

    Raises:
        ConfigError: any check fails; the message names the option or trial.
    """
    if scheduler not in SCHEDULERS:
        raise ConfigError(f"--scheduler must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}")
    if metric not in METRICS:
        raise ConfigError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    trials = space.trials(base.seed)
    configs = trial_configs(base, trials)
    check_ranges(base, space.ranges)
    if scheduler == "pbt" and not space.keys:
        raise ConfigError("--scheduler pbt needs a swept hyperparameter (--grid or a range)")
    if perturbation_interval is not None and (scheduler != "pbt" or not perturbation_interval > 0):
        raise ConfigError("--perturbation-interval takes a positive number, with --scheduler pbt")
    cpus = float(cpus if cpus is not None else available_cpus() if address is None else 0)
    if trials_in_parallel is None:
        trials_in_parallel = max(1, min(len(trials), int(cpus) or len(trials)))
    if trials_in_parallel < 1:
        raise ConfigError(f"--trials-in-parallel must be >= 1, got {trials_in_parallel}")
    if cpus:
        _check_cores(configs, trials_in_parallel, cpus)
    return SweepSpec(
        base=config_to_dict(base),
        grid={k: list(v) for k, v in space.grid.items()},
        ranges={k: [r.low, r.high, r.log] for k, r in space.ranges.items()},
        trials=trials,
        scheduler=scheduler,
        metric=metric,
        trials_in_parallel=trials_in_parallel,
        cpus=cpus,
        perturbation_interval=perturbation_interval,
        address=address,
    )


def _check_cores(configs: Sequence[Config], parallel: int, cpus: float) -> None:
    """Refuses trials whose set evaluator workers, that many at once, exceed the CPUs."""
    for index, cfg in enumerate(configs):
        workers = cfg.evaluator.workers
        if workers is not None and workers * parallel > cpus:
            raise ConfigError(
                f"trial {index}: evaluator.workers={workers} with {parallel} trials in parallel "
                f"needs {workers * parallel} CPUs, {cpus:g} are available; lower "
                "--trials-in-parallel or evaluator.workers (or leave it null: each trial then "
                "gets its share)"
            )


def _share(spec: SweepSpec) -> tuple[float, int]:
    """``(CPUs Tune reserves per trial, threads and workers a trial uses)``."""
    share = spec.cpus / spec.trials_in_parallel
    return share, max(1, math.floor(share))


def _mutations(spec: SweepSpec) -> dict[str, Any]:
    from ray import tune

    mutations: dict[str, Any] = {k: list(v) for k, v in spec.grid.items() if k != "seed"}
    for key, (low, high, log) in spec.ranges.items():
        mutations[key] = (tune.loguniform if log else tune.uniform)(low, high)
    return mutations


def _scheduler(spec: SweepSpec) -> Any:
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    from neuroevo.sweeps.pbt import SynchronousPBT

    attr, budget = spec.time_attr()
    if spec.scheduler == "asha":
        return ASHAScheduler(
            time_attr=attr, max_t=budget, grace_period=max(1, budget / 8), reduction_factor=2
        )
    if spec.scheduler == "pbt":
        interval = spec.perturbation_interval or max(1, budget / PBT_PERTURBATIONS)
        # Synchronous: every trial reaches the interval before any exploits, so who copies
        # whom depends on the scores, not on which process happened to start first.
        return SynchronousPBT(
            time_attr=attr,
            perturbation_interval=interval,
            hyperparam_mutations={"trial": _mutations(spec)},
            quantile_fraction=0.25,
            resample_probability=0.25,
        )
    return FIFOScheduler()


def tune_trial_name(trial: Any) -> str:
    """Tune's name and directory of a trial: ``trial-NNN`` by its index in the plan."""
    return trial_name(trial.config["trial"]["index"])


def _trainable(spec: SweepSpec, sweep_dir: Path) -> Any:
    from ray import tune

    share, threads = _share(spec)
    setup = TrialSetup(str(sweep_dir.resolve()), spec.base, spec.metric, threads, threads)
    return tune.with_resources(tune.with_parameters(run_trial, setup=setup), {"cpu": share})


def _tuner(spec: SweepSpec, sweep_dir: Path, resume: bool, quiet: bool) -> Any:
    from ray import tune

    trainable = _trainable(spec, sweep_dir)
    tune_dir = sweep_dir / TUNE_DIR
    if resume and tune.Tuner.can_restore(str(tune_dir.resolve())):
        return tune.Tuner.restore(
            str(tune_dir.resolve()), trainable, resume_unfinished=True, resume_errored=False
        )
    variants = [{"index": index, **trial} for index, trial in enumerate(spec.trials)]
    return tune.Tuner(
        trainable,
        param_space={"trial": tune.grid_search(variants)},
        tune_config=tune.TuneConfig(
            metric=spec.metric,
            mode="max",
            scheduler=_scheduler(spec),
            max_concurrent_trials=spec.trials_in_parallel,
            trial_name_creator=tune_trial_name,
            trial_dirname_creator=tune_trial_name,
            # A fresh process per trial and per PBT restart: each sizes TensorFlow's threads
            # before its runtime starts, and builds its run from nothing but the checkpoint.
            reuse_actors=False,
        ),
        run_config=tune.RunConfig(
            name=TUNE_DIR,
            storage_path=str(sweep_dir.resolve()),
            verbose=0 if quiet else 1,
            # PBT restores a trial from another's checkpoint some time after choosing it, by
            # when that trial has saved newer ones: PBT keeps them all.
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=None if spec.scheduler == "pbt" else 2
            ),
            failure_config=tune.FailureConfig(max_failures=0),
        ),
    )


def run_sweep(spec: SweepSpec, sweep_dir: Path, *, resume: bool, quiet: bool) -> dict[str, str]:
    """Runs (or resumes) the sweep's trials until each has finished, stopped or failed.

    Ray is started for the sweep (a local node, ended with the sweep even after a SIGKILL:
    ``neuroevo.evaluation.ray.local``) or joined at ``spec.address``, unless this process has
    already started it; what starting Ray changed in the process is undone at the end.

    Returns:
        Trial name -> a one-line error Tune recorded for it (failures outside the trial's own
        code, e.g. a worker that died).
    """
    import ray

    from neuroevo.evaluation.ray.local import RAY_SESSION_ENVIRON, init_local_ray

    local_ray = None
    changes = ProcessChanges()
    try:
        with recorded_changes(keep_environ=RAY_SESSION_ENVIRON) as changes:
            # Tune's own CSV/JSON/TensorBoard logs would duplicate each run directory's.
            os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
            # Ctrl-C is KeyboardInterrupt, as in train (Tune's handler would end the sweep as
            # if it had finished, every unfinished trial then looking stopped).
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
            if quiet:  # Tune's newer output prints its settings even when told to be silent
                os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
            owns_ray = not ray.is_initialized()
            try:
                if owns_ray:
                    if spec.address is None:
                        cpus = math.ceil(spec.cpus)
                        local_ray = init_local_ray(num_cpus=cpus, log_to_driver=not quiet)
                    else:
                        ray.init(address=spec.address, log_to_driver=not quiet)
                if not spec.cpus:
                    cpus = float(ray.cluster_resources().get("CPU", 1))
                    spec = dataclasses.replace(spec, cpus=cpus)
                # Without those logs Tune warns that it cannot read them back; it needs not.
                analysis = logging.getLogger("ray.tune.analysis.experiment_analysis")
                level = analysis.level
                analysis.setLevel(logging.ERROR)
                try:
                    with warnings.catch_warnings():
                        # Advice to reuse processes, which trials deliberately do not.
                        warnings.filterwarnings("ignore", "Consider boosting PBT performance")
                        results = _tuner(spec, sweep_dir, resume, quiet).fit()
                finally:
                    analysis.setLevel(level)
            finally:
                if owns_ray:  # a node of our own ends; a cluster we joined is only left
                    ray.shutdown()
                if local_ray is not None:
                    local_ray.stop()
    finally:
        changes.undo()
    return {
        Path(result.path).name: _last_line(result.error)
        for result in results
        if result.error is not None
    }


def _last_line(error: BaseException) -> str:
    """The last non-empty line of an error Tune recorded (its traceback ends with the cause)."""
    lines = [line.strip() for line in str(getattr(error, "cause", None) or error).splitlines()]
    return next((line for line in reversed(lines) if line), type(error).__name__)
