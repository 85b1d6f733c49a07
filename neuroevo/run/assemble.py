"""Everything a training run needs, built from its plan: ``assemble(plan) -> RunParts``.

The one place where a planned run's parts are built: the env and model (by their registries,
:mod:`neuroevo.run.build`), the reference batch of virtual batch norm, the noise table, the
optimizer and the evaluator of the configured backend, with the device, workers and slots the
plan resolved. Nothing is checked again: :func:`neuroevo.run.plan.plan` did every check. A Ray
actor builds its own env, model and noise table with :class:`NodeFactory`, the same code the
driver runs, from the same config and with the driver's reference batch and behaviour
options, so every node evaluates exactly what a local run would. The trainer, notebooks and
benchmarks receive the parts and only use them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from neuroevo.algorithms import Optimizer
from neuroevo.config.schema import Config
from neuroevo.envs import BatchedEnv
from neuroevo.genomes.genome import GenomeDecoder
from neuroevo.genomes.noise import NoiseTable
from neuroevo.models import PopulationModel
from neuroevo.run.build import (
    build_env,
    build_model,
    build_optimizer,
    draw_reference_batch,
    uses_reference_batch,
)
from neuroevo.run.plan import RunPlan

if TYPE_CHECKING:
    from neuroevo.evaluation.base import BaseEvaluator
    from neuroevo.evaluation.ray import EvaluatorParts


@dataclasses.dataclass(frozen=True)
class NodeFactory:
    """Builds one node's evaluation parts (env, model, decoder) from the run's config.

    Picklable: the Ray backend ships it to each node and calls it there. Every node gets the
    driver's reference batch and behaviour options, so its results equal a local run's.

    Attributes:
        cfg: the run's config.
        num_slots: env and model slots of the node.
        workers: evaluator worker threads of the node.
        reference_batch: the driver's virtual-batch-norm batch, or None when the model has
            none.

    Forward passes run on ``evaluator.device``, else on the node's first GPU or its CPU.
    """

    cfg: Config
    num_slots: int
    workers: int | None = None
    reference_batch: np.ndarray | None = None

    def __call__(self) -> EvaluatorParts:
        from neuroevo.evaluation.evaluator import default_device
        from neuroevo.evaluation.ray import EvaluatorParts

        cfg = self.cfg
        env = build_env(cfg, self.num_slots)
        model = build_model(cfg, env, cfg.evaluator.device or default_device())
        if self.reference_batch is not None:
            model.set_reference_batch(self.reference_batch)
        noise = NoiseTable(cfg.noise.seed, cfg.noise.size, cfg.noise.cache_dir)
        decoder = GenomeDecoder(noise, model.init_scales())
        return EvaluatorParts(env, model, decoder, self.workers, cfg.behavior)


@dataclasses.dataclass
class RunParts:
    """What ``assemble`` builds; ``close`` releases the evaluator and the env.

    Attributes:
        cfg: the config the parts were built from.
        env: the driver's batched env (the local evaluator's).
        model: the driver's population model, shaped for ``env``.
        noise: the shared noise table.
        optimizer: the configured optimizer, at generation 0.
        evaluator: the configured backend's evaluator (local threads or Ray actors).
        reference_batch: the virtual-batch-norm batch every node uses, or None.
    """

    cfg: Config
    env: BatchedEnv
    model: PopulationModel
    noise: NoiseTable
    optimizer: Optimizer
    evaluator: BaseEvaluator
    reference_batch: np.ndarray | None = None

    def close(self) -> None:
        self.evaluator.close()
        self.env.close()

    def __enter__(self) -> RunParts:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def assemble(plan: RunPlan) -> RunParts:
    """Builds a planned run's env, model, noise table, optimizer and evaluator.

    Args:
        plan: the checked run (:func:`neuroevo.run.plan.plan`); on resume, its checkpoint's
            virtual-batch-norm batch is used, else one is drawn from the run seed (models with
            virtual batch norm only).

    Returns:
        The parts; the caller owns them (``close``).

    Raises:
        ValueError: an env, model or optimizer rejects the config.
    """
    cfg = plan.config
    env = build_env(cfg, plan.num_slots)
    try:
        model = build_model(cfg, env, plan.device)
        reference_batch = None
        if uses_reference_batch(model):
            reference_batch = plan.saved_reference_batch
            if reference_batch is None:
                reference_batch = draw_reference_batch(cfg.seed, env)
            model.set_reference_batch(reference_batch)
        noise = NoiseTable(cfg.noise.seed, cfg.noise.size, cfg.noise.cache_dir)
        optimizer = build_optimizer(cfg, model, noise)
        factory = NodeFactory(cfg, plan.num_slots, plan.workers, reference_batch)
        evaluator = _evaluator(cfg, env, model, optimizer, factory, plan.device)
    except BaseException:
        env.close()
        raise
    return RunParts(cfg, env, model, noise, optimizer, evaluator, reference_batch)


def _evaluator(
    cfg: Config,
    env: BatchedEnv,
    model: PopulationModel,
    optimizer: Optimizer,
    factory: NodeFactory,
    device: str,
) -> BaseEvaluator:
    """The evaluator of ``evaluator.backend``: local threads on ``env`` and ``model``, or Ray
    actors that each build their parts with ``factory``."""
    if cfg.evaluator.backend == "ray":
        from neuroevo.evaluation.ray import RayEvaluator

        return RayEvaluator(
            factory,
            address=cfg.evaluator.ray.address,
            workers_per_node=cfg.evaluator.ray.workers_per_node,
            centers=optimizer.decoder,
        )
    from neuroevo.evaluation.evaluator import Evaluator

    return Evaluator(
        env,
        model,
        optimizer.decoder.decode_batch,
        workers=factory.workers,
        rollout=cfg.evaluator.rollout,
        chunk_steps=cfg.evaluator.chunk_steps,
        device=device,
        behavior=cfg.behavior,
    )
