"""The config's components one at a time, each by its registry: the env, the model, the
optimizer, and the reference batch of virtual batch norm.

:func:`neuroevo.run.assemble.assemble` builds a whole run from them, a Ray node its own env and
model (:class:`~neuroevo.run.assemble.NodeFactory`), the plan a one-slot probe
(:mod:`neuroevo.run.plan`) and a saved policy its env and model (:mod:`neuroevo.run.policy`).
"""

from __future__ import annotations

import numpy as np

from neuroevo.algorithms import Optimizer, strategy_class
from neuroevo.config.schema import Config
from neuroevo.core.params import to_dict
from neuroevo.envs import BatchedEnv, make_env
from neuroevo.genomes.noise import NoiseTable
from neuroevo.models import (
    NormalizesObservations,
    PopulationModel,
    UsesReferenceBatch,
    make_model,
)

REFERENCE_BATCH_SIZE = 128
"""Observations in the reference batch of a model with virtual batch norm."""


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
    """The config's optimizer for ``model``'s parameters, at generation 0, built from the
    config's validated ``algorithm`` section as it is."""
    params = cfg.algorithm.selected
    strategy = strategy_class(cfg.algorithm.name, params)
    return strategy(model.num_params, model.init_scales(), noise, seed=cfg.seed, params=params)
