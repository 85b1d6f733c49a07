"""The Atari networks of the deep neuroevolution papers, as population models.

``NatureLarge`` is the DQN network of Mnih et al. (2015) that Such et al. (2017) evolve with the
GA and ES: conv 8x8/4 32, conv 4x4/2 64, conv 3x3/1 64 (SAME padding), dense 512, dense
``num_actions``, relu. With 84x84x4 inputs and 18 actions it has 4,052,658 parameters, 96% of
them in the 7744x512 dense kernel, which is why a policy step is memory-bound on a CPU.
``NatureSmall`` is the smaller network of their random-search runs (Mnih et al. 2013): conv
8x8/4 16, conv 4x4/2 32, dense 256.
"""

from __future__ import annotations

from typing import Any

from neuroevo.envs.base import ActionSpec, ObservationSpec
from neuroevo.models.layers import Conv2D, Dense, Flatten
from neuroevo.models.sequential import SequentialModel


def _check_image(observation_spec: ObservationSpec, model: str) -> None:
    if len(observation_spec.shape) != 3:
        raise ValueError(
            f"{model} expects image observations [height, width, channels], got shape "
            f"{list(observation_spec.shape)}; use 'mlp' for vector observations"
        )


class NatureLarge(SequentialModel):
    """The DQN "Nature" network, one per slot. Options as in ``SequentialModel``."""

    image_observations = True

    def __init__(
        self,
        num_slots: int,
        observation_spec: ObservationSpec,
        action_spec: ActionSpec,
        **options: Any,
    ):
        _check_image(observation_spec, "nature_large")
        layers = [
            Conv2D(32, 8, 4, name="conv1"),
            Conv2D(64, 4, 2, name="conv2"),
            Conv2D(64, 3, 1, name="conv3"),
            Flatten(name="flatten"),
            Dense(512, name="fc"),
        ]
        super().__init__(num_slots, observation_spec, action_spec, layers, **options)


class NatureSmall(SequentialModel):
    """The smaller Atari network of the random-search experiments, one per slot."""

    image_observations = True

    def __init__(
        self,
        num_slots: int,
        observation_spec: ObservationSpec,
        action_spec: ActionSpec,
        **options: Any,
    ):
        _check_image(observation_spec, "nature_small")
        layers = [
            Conv2D(16, 8, 4, name="conv1"),
            Conv2D(32, 4, 2, name="conv2"),
            Flatten(name="flatten"),
            Dense(256, name="fc"),
        ]
        super().__init__(num_slots, observation_spec, action_spec, layers, **options)
