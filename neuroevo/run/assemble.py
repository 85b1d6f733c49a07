"""Everything a training run needs, built from its config: ``assemble(cfg) -> RunParts``.

The one place where the config's sections become objects: the env and model (by their
registries), the reference batch of virtual batch norm, the noise table, the optimizer and the
evaluator of the configured backend. A Ray actor builds its own env, model and noise table with
:class:`NodeFactory`, the same code the driver runs, from the same config and with the
driver's reference batch and behaviour options, so every node evaluates exactly what a local
run would. The trainer, notebooks and benchmarks receive the parts and only use them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from neuroevo.algorithms import ALGORITHMS, Optimizer, make_algorithm
from neuroevo.config.schema import Config
from neuroevo.core.params import to_dict
from neuroevo.envs import BatchedEnv, make_env
from neuroevo.genomes.genome import GenomeDecoder
from neuroevo.genomes.noise import NoiseTable
from neuroevo.models import (
    NormalizesObservations,
    PopulationModel,
    UsesReferenceBatch,
    make_model,
)
from neuroevo.run.preflight import check_model_sizes, check_sizes

if TYPE_CHECKING:
    from neuroevo.evaluation.base import BaseEvaluator
    from neuroevo.evaluation.ray import EvaluatorParts

DEFAULT_SLOTS_PER_WORKER = 32
"""Slots a worker steps at once unless configured: enough to amortise per-call overhead."""

REFERENCE_BATCH_SIZE = 128
"""Observations in the reference batch of a model with virtual batch norm."""


def max_evaluations(cfg: Config) -> int:
    """Most episodes one request asks for: no run needs more slots than this."""
    params = cfg.algorithm.selected
    return params.population_size * params.population_episodes


def build_env(cfg: Config, num_slots: int) -> BatchedEnv:
    """The config's batched env with ``num_slots`` slots, built by the env registry."""
    env = cfg.env
    return make_env(
        env.kind,
        env.id,
        num_slots,
        max_episode_steps=env.max_episode_steps,
        **to_dict(env.options),
    )


def build_model(cfg: Config, env: BatchedEnv, device: str | None = None) -> PopulationModel:
    """The config's population model, shaped for ``env``, built by the model registry."""
    return make_model(
        cfg.model.name,
        env.num_slots,
        env.observation_spec,
        env.action_spec,
        device=device,
        **cfg.model.options,
    )


def uses_reference_batch(model: PopulationModel) -> bool:
    """Whether ``model`` normalises with virtual batch norm and so needs a reference batch."""
    return isinstance(model, UsesReferenceBatch) and model.virtual_batch_norm


def normalizes_observations(model: PopulationModel) -> bool:
    """Whether ``model`` normalises observations with statistics the trainer maintains."""
    return isinstance(model, NormalizesObservations) and model.observation_normalization


def draw_reference_batch(seed: int, env: BatchedEnv) -> np.ndarray:
    """Observations of one random-action episode stream, as Uber's ``get_ref_batch`` draws
    the reference batch of virtual batch norm: ``REFERENCE_BATCH_SIZE`` consecutive
    observations in slot 0 under uniformly random actions, starting a new episode whenever one
    ends. Episode seeds and actions come from ``seed`` (the run seed), so the batch is fixed for
    the run. The slot is left mid-episode: the evaluator resets a slot before using it.

    Returns:
        ``[REFERENCE_BATCH_SIZE, *observation_spec.shape]`` in the observation dtype.
    """
    rng = np.random.default_rng([seed, 0x7B4])
    slot = np.zeros(1, dtype=np.int32)
    spec = env.action_spec
    batch = []
    env.reset(slot, rng.integers(0, 2**31, size=1))
    while len(batch) < REFERENCE_BATCH_SIZE:
        batch.append(np.asarray(env.observation(slot))[0])
        if spec.discrete:
            action = rng.integers(0, spec.num_actions, size=1).astype(np.int32)
        else:
            action = rng.uniform(spec.low, spec.high, size=(1, *spec.shape)).astype(np.float32)
        _, terminated, truncated = env.step(slot, action)
        if bool(np.asarray(terminated)[0] or np.asarray(truncated)[0]):
            env.reset(slot, rng.integers(0, 2**31, size=1))
    return np.stack(batch)


def build_optimizer(cfg: Config, model: PopulationModel, noise: NoiseTable) -> Optimizer:
    """The config's optimizer for ``model``'s parameters, at generation 0."""
    return make_algorithm(
        cfg.algorithm.name,
        num_params=model.num_params,
        scales=model.init_scales(),
        noise=noise,
        seed=cfg.seed,
        **to_dict(cfg.algorithm.selected),
    )


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


def assemble(cfg: Config, reference_batch: np.ndarray | None = None) -> RunParts:
    """Builds a run's env, model, noise table, optimizer and evaluator from ``cfg``.

    Args:
        cfg: the run's config.
        reference_batch: a resumed run's saved virtual-batch-norm batch; None draws it from
            the run seed (models with virtual batch norm only).

    Returns:
        The parts; the caller owns them (``close``).

    Raises:
        ValueError: a generation, the slots' weights or the noise table does not fit memory
            or disk (:mod:`neuroevo.run.preflight`), or an env, model or optimizer rejects the
            config.
    """
    from neuroevo.evaluation.evaluator import (
        default_device,
        default_workers,
        reserve_inter_op_threads,
    )

    check_sizes(cfg)
    reserve_inter_op_threads(cfg.evaluator.workers)
    device = cfg.evaluator.device or default_device()
    slots_per_worker = cfg.evaluator.slots_per_worker or DEFAULT_SLOTS_PER_WORKER
    workers = cfg.evaluator.workers or default_workers(slots_per_worker * 2, device)
    num_slots = max(workers, min(workers * slots_per_worker, max_evaluations(cfg)))
    workers = min(workers, num_slots)
    check_model_sizes(cfg, num_slots, *_probe_sizes(cfg, device))
    env = build_env(cfg, num_slots)
    try:
        if ALGORITHMS[cfg.algorithm.name].needs_behavior and not env.provides_behavior:
            raise ValueError(
                f"algorithm.name: '{cfg.algorithm.name}' needs a behaviour characterisation per "
                f"episode, but env.kind '{cfg.env.kind}' provides none (BatchedEnv.behavior); "
                "use an env with behavior(), or set env.gym.behavior for a gymnasium env"
            )
        model = build_model(cfg, env, device)
        if uses_reference_batch(model):
            if reference_batch is None:
                reference_batch = draw_reference_batch(cfg.seed, env)
            model.set_reference_batch(reference_batch)
        else:
            reference_batch = None
        noise = NoiseTable(cfg.noise.seed, cfg.noise.size, cfg.noise.cache_dir)
        optimizer = build_optimizer(cfg, model, noise)
        factory = NodeFactory(cfg, num_slots, workers, reference_batch)
        evaluator = _evaluator(cfg, env, model, optimizer, factory, device)
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


def _probe_sizes(cfg: Config, device: str) -> tuple[int, int]:
    """``(parameters of the model, values of one behaviour)`` from a one-slot env and model
    (cheap to build; the model refuses weights that do not fit memory before allocating)."""
    env = build_env(cfg, 1)
    try:
        num_params = build_model(cfg, env, device).num_params
        if not env.provides_behavior:
            return num_params, 0
        import tensorflow as tf

        traced = tf.function(env.behavior).get_concrete_function(tf.TensorSpec([None], tf.int32))
        shape = traced.structured_outputs.shape[1:]
        return num_params, int(np.prod(shape)) if shape.is_fully_defined() else 0
    finally:
        env.close()
