"""Population-batched networks: many distinct networks of one architecture, run by slot index.

``make_model(name, ...)`` builds a registered model; ``MODELS`` lists them; ``from_keras``
imports a ``tf.keras`` model. A model is a ``SequentialModel`` subclass over the population
layers (``layers``: ``Conv2D``, ``Dense``, ``Flatten``, pooling, ...; ``recurrent``: ``LSTM``,
``GRU``); registering it
(``MODELS.register(name, "package.module:Class")``, see :mod:`neuroevo.core.registry`) adds its name
to every choice list and, when its ``params_class`` has fields, its ``model.<name>`` section
to the training config (see docs/ARCHITECTURE.md). Models are imported
only when one is made: importing this module (as the config does) does not import TensorFlow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neuroevo.core.params import check_choice
from neuroevo.core.registry import Lazy, Registry, lazy_exports
from neuroevo.models.params import GruParams, LstmParams, MlpParams, ModelParams

if TYPE_CHECKING:
    from neuroevo.envs.base import ActionSpec, ObservationSpec
    from neuroevo.models.base import (
        NormalizesObservations,
        ParamSpec,
        PopulationModel,
        UsesReferenceBatch,
    )
    from neuroevo.models.keras import KerasModel, from_keras
    from neuroevo.models.layers import (
        Activation,
        Conv2D,
        Dense,
        Flatten,
        GlobalPool2D,
        LayerNormalization,
        Pool2D,
        PopulationLayer,
        Reshape,
    )
    from neuroevo.models.mlp import MLP
    from neuroevo.models.nature import NatureLarge, NatureSmall
    from neuroevo.models.recurrent import GRU, LSTM, GruModel, LstmModel, RecurrentLayer
    from neuroevo.models.sequential import SequentialModel

MODELS = Registry(
    "model",
    {
        "nature_large": Lazy(
            "neuroevo.models.nature:NatureLarge", "neuroevo.models.params:NatureParams"
        ),
        "nature_small": Lazy(
            "neuroevo.models.nature:NatureSmall", "neuroevo.models.params:NatureParams"
        ),
        "mlp": Lazy("neuroevo.models.mlp:MLP", "neuroevo.models.params:MlpParams"),
        "lstm": Lazy("neuroevo.models.recurrent:LstmModel", "neuroevo.models.params:LstmParams"),
        "gru": Lazy("neuroevo.models.recurrent:GruModel", "neuroevo.models.params:GruParams"),
    },
    entry_points="neuroevo.models",
)
"""Population models by config name (``model.name``); each is imported when first built."""

__getattr__ = lazy_exports(
    __name__,
    {
        "neuroevo.models.base": (
            "NormalizesObservations",
            "ParamSpec",
            "PopulationModel",
            "UsesReferenceBatch",
        ),
        "neuroevo.models.layers": (
            "Activation",
            "Conv2D",
            "Dense",
            "Flatten",
            "GlobalPool2D",
            "LayerNormalization",
            "Pool2D",
            "PopulationLayer",
            "Reshape",
        ),
        "neuroevo.models.recurrent": ("GRU", "LSTM", "GruModel", "LstmModel", "RecurrentLayer"),
        "neuroevo.models.keras": ("KerasModel", "from_keras"),
        "neuroevo.models.mlp": ("MLP",),
        "neuroevo.models.nature": ("NatureLarge", "NatureSmall"),
        "neuroevo.models.sequential": ("SequentialModel",),
    },
)
"""The models and their building blocks, imported (with TensorFlow) on first use."""


def make_model(
    name: str,
    num_slots: int,
    observation_spec: ObservationSpec,
    action_spec: ActionSpec,
    **options: Any,
) -> PopulationModel:
    """Builds the registered model ``name`` with ``num_slots`` slots.

    Args:
        name: a key of ``MODELS``.
        num_slots: networks held at once.
        observation_spec, action_spec: the environment's specs.
        **options: the fields of :class:`ModelParams` and of the model's ``params_class``
            (e.g. ``hidden_sizes`` for ``mlp``), and ``device``.

    Raises:
        ValueError: unknown name, or a bad option value (the message names it).
        TypeError: an option the model does not take.

    Example:
        Four linear policies for 3-d observations and 2 discrete actions:

        >>> import tensorflow as tf
        >>> from neuroevo.envs import ActionSpec, ObservationSpec
        >>> model = make_model(
        ...     "mlp",
        ...     num_slots=4,
        ...     observation_spec=ObservationSpec((3,), tf.float32),
        ...     action_spec=ActionSpec(discrete=True, num_actions=2),
        ...     hidden_sizes=[],
        ... )
        >>> model.num_params  # a 2x3 kernel and 2 biases
        8
        >>> model.load([0], tf.ones([1, 8]))
        >>> model.act([0], [[1.0, 2.0, 3.0]]).numpy().tolist()
        [0]
    """
    check_choice(name, MODELS, "model")
    return MODELS[name](num_slots, observation_spec, action_spec, **options)


__all__ = [
    "GRU",
    "LSTM",
    "MLP",
    "MODELS",
    "Activation",
    "Conv2D",
    "Dense",
    "Flatten",
    "GlobalPool2D",
    "GruModel",
    "GruParams",
    "KerasModel",
    "LayerNormalization",
    "LstmModel",
    "LstmParams",
    "MlpParams",
    "ModelParams",
    "NatureLarge",
    "NatureSmall",
    "NormalizesObservations",
    "ParamSpec",
    "Pool2D",
    "PopulationLayer",
    "PopulationModel",
    "RecurrentLayer",
    "Reshape",
    "SequentialModel",
    "UsesReferenceBatch",
    "from_keras",
    "make_model",
]
