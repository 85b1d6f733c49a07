"""Multi-layer perceptron policies for vector observations (MuJoCo), with input normalisation.

As in the ES paper's MuJoCo policy (Salimans et al. 2017), observations can be normalised by a
running mean and std that the trainer maintains and shares across the population
(``neuroevo.evaluation.obs_norm``): the model only applies ``clip((obs - mean) / std, -obs_clip,
obs_clip)``. The statistics are non-trainable variables on the model's device, set with
``set_obs_stats``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from neuroevo.core.params import take
from neuroevo.envs.base import ActionSpec, ObservationSpec
from neuroevo.models.layers import Dense, PopulationLayer
from neuroevo.models.params import MlpParams
from neuroevo.models.sequential import SequentialModel


def hidden_layers(
    model: str, observation_spec: ObservationSpec, hidden_sizes: Sequence[int], activation: str
) -> list[PopulationLayer]:
    """The Dense layers ``fc1, fc2, ...`` of a vector-observation model, after checking that
    ``observation_spec`` is a float32 vector (``model`` names the model in the error)."""
    if len(observation_spec.shape) != 1 or observation_spec.dtype != tf.float32:
        raise ValueError(
            f"{model} expects float32 vector observations [d], got "
            f"{observation_spec.dtype.name} {list(observation_spec.shape)}"
        )
    return [Dense(size, activation, name=f"fc{i}") for i, size in enumerate(hidden_sizes, 1)]


class MLP(SequentialModel):
    """Dense layers of ``hidden_sizes`` with one activation, then the output layer.

    Args:
        num_slots, observation_spec, action_spec: as in ``SequentialModel``; observations
            must be float32 vectors ``[d]``.
        **options: the fields of :class:`MlpParams`, and those ``SequentialModel`` takes
            (dtype, device, output, ...).
    """

    params_class = MlpParams

    def __init__(
        self,
        num_slots: int,
        observation_spec: ObservationSpec,
        action_spec: ActionSpec,
        **options: Any,
    ):
        own = take(MlpParams, options)
        layers = hidden_layers("mlp", observation_spec, own.hidden_sizes, own.activation)
        self.observation_normalization = own.observation_normalization
        self.obs_clip = own.obs_clip
        dim = observation_spec.shape[0]
        super().__init__(num_slots, observation_spec, action_spec, layers, **options)
        with tf.device(self.device):
            self.obs_mean = tf.Variable(tf.zeros([dim]), trainable=False, name="obs_mean")
            self.obs_std = tf.Variable(tf.ones([dim]), trainable=False, name="obs_std")

    def set_obs_stats(self, mean: object, std: object) -> None:
        """Sets the observation normalisation: float ``[d]`` mean and std (std > 0)."""
        if not self.observation_normalization:
            raise ValueError("this model was built with observation_normalization=False")
        dim = self.observation_spec.shape[0]
        mean = np.asarray(mean, np.float32)
        std = np.asarray(std, np.float32)
        if mean.shape != (dim,) or std.shape != (dim,):
            raise ValueError(f"mean and std must be [{dim}], got {mean.shape} and {std.shape}")
        if not np.all(np.isfinite(mean)) or not np.all(std > 0):
            raise ValueError("mean must be finite and std positive")
        self.obs_mean.assign(mean)
        self.obs_std.assign(std)

    def preprocess(self, obs: tf.Tensor) -> tf.Tensor:
        if not self.observation_normalization:
            return tf.cast(obs, tf.float32)
        normalised = (tf.cast(obs, tf.float32) - self.obs_mean) / self.obs_std
        return tf.clip_by_value(normalised, -self.obs_clip, self.obs_clip)
