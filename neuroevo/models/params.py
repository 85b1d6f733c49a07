"""The models' options: the ``model`` config section's shared keys and each model's own section.

Kept apart from the models (which import TensorFlow) so that a config is loaded and validated
without TensorFlow; the models read their classes and choice lists from here.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from neuroevo.core.params import Params, check, check_choice

__all__ = [
    "ACTIVATIONS",
    "DISCRETE_OUTPUTS",
    "DTYPES",
    "OUTPUTS",
    "GruParams",
    "LstmParams",
    "MlpParams",
    "ModelParams",
    "NatureParams",
    "OwnModelParams",
    "RecurrentParams",
]

DTYPES = ("float32", "bfloat16")
OUTPUTS = ("argmax", "tanh", "clip")
DISCRETE_OUTPUTS = ("argmax",)
ACTIVATIONS: dict[str, str | None] = {
    "relu": "nn.relu",
    "tanh": "math.tanh",
    "elu": "nn.elu",
    "sigmoid": "math.sigmoid",
    "softmax": "nn.softmax",
    "softplus": "math.softplus",
    "selu": "nn.selu",
    "gelu": "nn.gelu",
    "swish": "nn.silu",
    "silu": "nn.silu",
    "linear": None,
}
"""Activation names and the TensorFlow function each stands for (its path in ``tf``; None:
the identity)."""


@dataclasses.dataclass(frozen=True)
class ModelParams(Params):
    """Options every population model takes; keys of the ``model`` config section.

    Attributes:
        output: how outputs become actions: ``"argmax"`` (discrete actions), ``"tanh"``
            (scaled to [low, high]) or ``"clip"`` (continuous; missing bounds mean [-1, 1]).
            None picks argmax for discrete and tanh for continuous actions.
        dtype: compute dtype of the kernels, ``"float32"`` or ``"bfloat16"`` (weights are
            rounded on ``load``; ``flat_params`` stay float32).
        virtual_batch_norm: normalise each hidden layer's pre-activations by statistics of a
            reference batch (``set_reference_batch``); the layer's bias is added after.
    """

    output: str | None = None
    dtype: str = "float32"
    virtual_batch_norm: bool = False

    def _validate(self) -> None:
        if self.output is not None:
            check_choice(self.output, OUTPUTS, "output")
        check_choice(self.dtype, DTYPES, "dtype")


@dataclasses.dataclass(frozen=True)
class OwnModelParams(Params):
    """Base of a model's own options (its ``model.<name>`` config section, none when it has
    no fields): besides its keys, what the model needs, read by the config to check it against
    the env before anything is built."""

    image_observations: ClassVar[bool | None] = None
    """Whether the model needs image observations (True) or vectors (False); None: either."""


@dataclasses.dataclass(frozen=True)
class NatureParams(OwnModelParams):
    """The Nature DQN convnets (``nature_large``, ``nature_small``): no options of their own."""

    image_observations = True


@dataclasses.dataclass(frozen=True)
class MlpParams(OwnModelParams):
    """The MLP's own options; the ``model.mlp`` config section.

    Attributes:
        hidden_sizes: widths of the hidden layers (may be empty: a linear policy).
        activation: a name in ``ACTIVATIONS``.
        observation_normalization: apply ``set_obs_stats`` statistics to the observations
            (identity until set), as the ES paper did for MuJoCo; off, observations enter
            unchanged.
        obs_clip: bound on normalised observations (ES used 5).
    """

    image_observations = False

    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "tanh"
    observation_normalization: bool = False
    obs_clip: float = 5.0

    def _validate(self) -> None:
        for i, size in enumerate(self.hidden_sizes):
            check(size >= 1, f"hidden_sizes[{i}]", size, ">= 1")
        check_choice(self.activation, ACTIVATIONS, "activation")
        check(self.obs_clip > 0, "obs_clip", self.obs_clip, "> 0")


@dataclasses.dataclass(frozen=True)
class RecurrentParams(OwnModelParams):
    """A recurrent policy's options; the ``model.lstm`` / ``model.gru`` config sections.

    Attributes:
        units: size of the recurrent cell's state.
        hidden_sizes: widths of dense layers between the observation and the cell (may be
            empty: the cell reads the observation).
        activation: the dense layers' activation, a name in ``ACTIVATIONS``.
    """

    image_observations = False

    units: int = 32
    hidden_sizes: tuple[int, ...] = ()
    activation: str = "tanh"

    def _validate(self) -> None:
        check(self.units >= 1, "units", self.units, ">= 1")
        for i, size in enumerate(self.hidden_sizes):
            check(size >= 1, f"hidden_sizes[{i}]", size, ">= 1")
        check_choice(self.activation, ACTIVATIONS, "activation")


@dataclasses.dataclass(frozen=True)
class LstmParams(RecurrentParams):
    """The ``model.lstm`` section (see :class:`RecurrentParams`)."""


@dataclasses.dataclass(frozen=True)
class GruParams(RecurrentParams):
    """The ``model.gru`` section (see :class:`RecurrentParams`)."""
