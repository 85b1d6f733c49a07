"""Population-batched networks: many distinct networks of one architecture, run by slot index.

``make_model(name, ...)`` builds a registered model; ``MODELS`` lists them. A model is a
``SequentialModel`` subclass over ``layers.Conv2D`` / ``Dense`` / ``Flatten``; registering it
(``MODELS.register(name, "package.module:Class")``, see :mod:`neuroevo.registry`) adds its name
to every choice list and, when its ``options_class`` has fields, its ``model.<name>`` section
to the training config (see docs/ARCHITECTURE.md). Models are imported
only when one is made: importing this module (as the config does) does not import TensorFlow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neuroevo.models.options import MlpOptions, ModelOptions
from neuroevo.params import check_choice
from neuroevo.registry import Lazy, Registry, lazy_exports

if TYPE_CHECKING:
    from neuroevo.envs.base import ActionSpec, ObservationSpec
    from neuroevo.models.base import (
        NormalizesObservations,
        ParamSpec,
        PopulationModel,
        UsesReferenceBatch,
    )
    from neuroevo.models.layers import Conv2D, Dense, Flatten, PopulationLayer
    from neuroevo.models.mlp import MLP
    from neuroevo.models.nature import NatureLarge, NatureSmall
    from neuroevo.models.sequential import SequentialModel

MODELS = Registry(
    "model",
    "options_class",
    {
        "nature_large": Lazy(
            "neuroevo.models.nature:NatureLarge", "neuroevo.models.options:NatureOptions"
        ),
        "nature_small": Lazy(
            "neuroevo.models.nature:NatureSmall", "neuroevo.models.options:NatureOptions"
        ),
        "mlp": Lazy("neuroevo.models.mlp:MLP", "neuroevo.models.options:MlpOptions"),
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
        "neuroevo.models.layers": ("Conv2D", "Dense", "Flatten", "PopulationLayer"),
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
        **options: the fields of :class:`ModelOptions` and of the model's ``options_class``
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
    "MLP",
    "MODELS",
    "Conv2D",
    "Dense",
    "Flatten",
    "MlpOptions",
    "ModelOptions",
    "NatureLarge",
    "NatureSmall",
    "NormalizesObservations",
    "ParamSpec",
    "PopulationLayer",
    "PopulationModel",
    "SequentialModel",
    "UsesReferenceBatch",
    "make_model",
]
