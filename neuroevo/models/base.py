"""The population-model protocol: many distinct networks of one architecture in one graph.

Each parameter tensor is stored as ``[num_slots, *shape]``; ``act(indices, obs)`` runs only
the listed slots, one observation per index. Weights enter as flat float32 vectors whose
layout (``layout``: name, per-network shape, init std per tensor) is stable, so optimizers
and genomes see only vectors.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Protocol, runtime_checkable

import numpy as np
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One parameter tensor of one network: its name, shape and initial std per element."""

    name: str
    shape: tuple[int, ...]
    init_std: float

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class PopulationModel(abc.ABC):
    """``num_slots`` networks sharing an architecture, evaluated by index.

    The flat parameter vector of one network is the concatenation, in ``layout`` order, of
    each tensor flattened in C order. Initial weights are ``init_scales() * N(0, 1)`` noise,
    which is what lets a genome be a seed into the shared noise table.
    """

    num_slots: int
    layout: tuple[ParamSpec, ...]
    device: str | None = None
    """Where the variables and forward pass live; None lets the evaluator choose."""

    @property
    def num_params(self) -> int:
        return sum(spec.size for spec in self.layout)

    def init_scales(self) -> np.ndarray:
        """float32 ``[num_params]``: per-parameter init std (0 for biases)."""
        return np.concatenate(
            [np.full(spec.size, spec.init_std, np.float32) for spec in self.layout]
        )

    @abc.abstractmethod
    def load(self, slots: tf.Tensor, flat_params: tf.Tensor) -> None:
        """Writes flat weights into slots: int32 ``[k]`` and float32 ``[k, num_params]``."""

    @abc.abstractmethod
    def forward(self, indices: tf.Tensor, obs: tf.Tensor) -> tf.Tensor:
        """Raw outputs ``[k, num_outputs]`` (float32) of the listed slots' networks."""

    @abc.abstractmethod
    def act(self, indices: tf.Tensor, obs: tf.Tensor) -> tf.Tensor:
        """Actions of the listed slots: argmax int32 ``[k]`` or squashed float32 ``[k, A]``."""

    def reset_state(self, indices: tf.Tensor) -> tf.Operation | None:
        """Starts a new episode in the listed slots: clears their recurrent state.

        A recurrent model keeps a hidden state per slot that each ``forward`` / ``act`` of the
        slot reads and advances (one call per agent step). Evaluators call this on the int32
        ``[k]`` slots they refill, after ``load`` and before the first forward of the new
        episode, inside their graph functions; it is safe in a ``tf.function``. Stateless
        models (the default) do nothing.

        Returns:
            The op to order later work after (a ``tf.no_op`` for stateless models; None when
            run eagerly).
        """
        del indices
        return tf.no_op()


@runtime_checkable
class NormalizesObservations(Protocol):
    """A model that can normalise observations with statistics the trainer maintains.

    ``observation_normalization`` says whether this instance uses them; the trainer then feeds
    ``set_obs_stats`` from ``neuroevo.evaluation.obs_norm.RunningObsStats`` and saves ``obs_mean`` /
    ``obs_std`` with the elite.
    """

    observation_normalization: bool
    obs_mean: tf.Variable
    obs_std: tf.Variable

    def set_obs_stats(self, mean: object, std: object) -> None:
        """Sets the float ``[d]`` mean and std the network normalises observations with."""


@runtime_checkable
class UsesReferenceBatch(Protocol):
    """A model whose layers normalise by statistics of a fixed reference batch (virtual batch
    norm, Salimans et al. 2016); ``virtual_batch_norm`` says whether this instance does."""

    virtual_batch_norm: bool

    def set_reference_batch(self, obs: object) -> None:
        """Fixes the reference observations ``[batch, *observation_shape]``."""
