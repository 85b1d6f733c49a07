"""A training run planned once: ``plan(config, run_dir) -> RunPlan``.

Every check of a training start happens here, once, before anything is built at full size or
written: the run directory (usable as asked; on resume, a config that differs from the saved
one only in keys that may change), the sizes against memory, disk and process limits
(:mod:`neuroevo.run.preflight`), the parameter count and behaviour size of a one-slot model
against the noise table, memory and the algorithm, and, on resume, the checkpoint to continue
from (listed and loaded once; its content is checked against the optimizer once it exists).
Every derived value (device, evaluator workers, slots) is resolved here too, and the plan
carries them: :func:`neuroevo.run.assemble.assemble` builds from a plan and checks nothing
again, and :func:`neuroevo.run.trainer.open_run` trains it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from neuroevo.algorithms import ALGORITHMS
from neuroevo.config.schema import Config
from neuroevo.loggers import require_trackers
from neuroevo.run.checkpoints import CheckpointScan
from neuroevo.run.preflight import check_model_sizes, check_sizes
from neuroevo.run.run_dir import RunDir, RunDirError

DEFAULT_SLOTS_PER_WORKER = 32
"""Slots a worker steps at once unless configured: enough to amortise per-call overhead."""


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A checked training start and every value derived from its config.

    Attributes:
        config: the run's config.
        run: the run directory, or None for parts built without one (a notebook, a
            benchmark).
        resume: whether the run continues from a checkpoint of ``run``.
        start_over: with ``resume``, whether a run without a valid checkpoint starts again
            from generation 0.
        device: where forward passes run.
        workers: evaluator worker threads.
        num_slots: env and model slots.
        checkpoints: on resume, the run's checkpoints (listed once) with the newest intact
            one loaded; None otherwise.
    """

    config: Config
    run: RunDir | None
    resume: bool
    start_over: bool
    device: str
    workers: int
    num_slots: int
    checkpoints: CheckpointScan | None

    @property
    def saved_reference_batch(self) -> np.ndarray | None:
        """The virtual-batch-norm batch of the checkpoint to resume (every checkpoint of a run
        holds the same), or None."""
        found = None if self.checkpoints is None else self.checkpoints.newest(skipped=[])
        return None if found is None else found[1].get("reference_batch")


def max_evaluations(cfg: Config) -> int:
    """Most episodes one request asks for: no run needs more slots than this."""
    params = cfg.algorithm.selected
    return params.population_size * params.population_episodes


def plan(
    cfg: Config,
    run_dir: str | Path | None = None,
    *,
    resume: bool = False,
    start_over: bool = False,
) -> RunPlan:
    """Checks a training start and resolves its derived values, once.

    Args:
        cfg: the resolved config.
        run_dir: the run directory (created when the run starts, or resumed when ``resume``);
            None for parts built without one.
        resume: continue from the newest valid checkpoint in ``run_dir``.
        start_over: with ``resume``, start again from generation 0 when ``run_dir`` holds no
            valid checkpoint (its metrics and TensorBoard points are discarded) instead of
            refusing.

    Returns:
        The :class:`RunPlan`.

    Raises:
        RunDirError: ``run_dir`` cannot be used as asked, or ``resume`` finds no intact
            checkpoint (the message names each one found and why it is invalid) and
            ``start_over`` is not set.
        ValueError: a generation, the slots' weights or the noise table does not fit memory
            or disk (:mod:`neuroevo.run.preflight`), or the env cannot give what the
            algorithm needs. Nothing is written.
    """
    if resume and run_dir is None:
        raise ValueError("resume needs the run directory")
    run = None if run_dir is None else RunDir(run_dir)
    if run is not None:
        run.check(cfg, resume=resume)
    check_sizes(cfg)
    require_trackers(cfg.logging)  # a missing package is found before anything is built
    checkpoints = None
    if resume:
        # Files first: nothing to resume is refused before anything is built.
        checkpoints = CheckpointScan(run.checkpoint_dir)
        skipped: list[str] = []
        if checkpoints.newest(skipped=skipped) is None and not start_over:
            raise RunDirError(no_checkpoint_message(run, skipped))
    from neuroevo.evaluation.evaluator import (
        default_device,
        default_workers,
        reserve_inter_op_threads,
    )

    reserve_inter_op_threads(cfg.evaluator.workers)
    device = cfg.evaluator.device or default_device()
    slots_per_worker = cfg.evaluator.slots_per_worker or DEFAULT_SLOTS_PER_WORKER
    workers = cfg.evaluator.workers or default_workers(slots_per_worker * 2, device)
    num_slots = max(workers, min(workers * slots_per_worker, max_evaluations(cfg)))
    workers = min(workers, num_slots)
    num_params, behavior_values, provides_behavior = _probe_sizes(cfg, device)
    check_model_sizes(cfg, num_slots, num_params, behavior_values)
    if ALGORITHMS[cfg.algorithm.name].needs_behavior and not provides_behavior:
        raise ValueError(
            f"algorithm.name: '{cfg.algorithm.name}' needs a behaviour characterisation per "
            f"episode, but env.kind '{cfg.env.kind}' provides none (BatchedEnv.behavior); "
            "use an env with behavior(), or set env.gym.behavior for a gymnasium env"
        )
    return RunPlan(cfg, run, resume, start_over, device, workers, num_slots, checkpoints)


def no_checkpoint_message(run: RunDir, skipped: list[str]) -> str:
    """Why ``run`` cannot be resumed: it holds no checkpoint, or none of them is valid
    (``skipped``: one ``"name: reason"`` each)."""
    what = (
        f"none is valid ({'; '.join(skipped)})"
        if skipped
        else "none was saved (the run stopped before its first generation finished)"
    )
    return (
        f"cannot resume '{run.path}': it holds no checkpoint to continue from, "
        f"{what}; add --start-over to run it again from generation 0, discarding its "
        "metrics"
    )


def _probe_sizes(cfg: Config, device: str) -> tuple[int, int, bool]:
    """``(parameters of the model, values of one behaviour, whether the env gives
    behaviours)`` from a one-slot env and model (cheap to build; the model refuses weights
    that do not fit memory before allocating)."""
    # Here, not at the top: the builders import TensorFlow, which must not load before the
    # sizes are checked (it may not even start).
    from neuroevo.run.build import build_env, build_model

    env = build_env(cfg, 1)
    try:
        num_params = build_model(cfg, env, device).num_params
        if not env.provides_behavior:
            return num_params, 0, False
        import tensorflow as tf

        traced = tf.function(env.behavior).get_concrete_function(tf.TensorSpec([None], tf.int32))
        shape = traced.structured_outputs.shape[1:]
        return num_params, int(np.prod(shape)) if shape.is_fully_defined() else 0, True
    finally:
        env.close()
