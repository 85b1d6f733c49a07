"""Population-batched networks: many distinct networks of one architecture, run by slot index.

``make_model(name, ...)`` builds a registered model; ``MODELS`` lists them. Custom models are a
``SequentialModel`` over ``layers.Conv2D`` / ``Dense`` / ``Flatten``.
"""

from __future__ import annotations

from typing import Any

from neuroevo.envs.base import ActionSpec, ObservationSpec
from neuroevo.models.base import ParamSpec, PopulationModel
from neuroevo.models.layers import Conv2D, Dense, Flatten, PopulationLayer
from neuroevo.models.mlp import MLP
from neuroevo.models.nature import NatureLarge, NatureSmall
from neuroevo.models.sequential import SequentialModel

MODELS: dict[str, type[SequentialModel]] = {
    "nature_large": NatureLarge,
    "nature_small": NatureSmall,
    "mlp": MLP,
}


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
        **options: the model's keyword options (``dtype``, ``device``,
            ``virtual_batch_norm``, ``output``, and e.g. ``hidden_sizes`` for ``mlp``).

    Raises:
        ValueError: unknown name, or a bad option value (the message names it).
        TypeError: an option the model does not take.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}")
    return MODELS[name](num_slots, observation_spec, action_spec, **options)


__all__ = [
    "MLP",
    "MODELS",
    "Conv2D",
    "Dense",
    "Flatten",
    "NatureLarge",
    "NatureSmall",
    "ParamSpec",
    "PopulationLayer",
    "PopulationModel",
    "SequentialModel",
    "make_model",
]
