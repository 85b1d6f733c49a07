"""The Atari networks of the deep neuroevolution papers, as population models.

``NatureLarge`` is the DQN network of Mnih et al. (2015) that Such et al. (2017) evolve with the
GA and ES: conv 8x8/4 32, conv 4x4/2 64, conv 3x3/1 64 (SAME padding), dense 512, dense
``num_actions``, relu. With 84x84x4 inputs and 18 actions it has 4,052,658 parameters, 96% of
them in the 7744x512 dense kernel, which is why a policy step is memory-bound on a CPU.
``NatureSmall`` is the smaller network of their random-search runs (Mnih et al. 2013): conv
8x8/4 16, conv 4x4/2 32, dense 256.
"""

from __future__ import annotations

from typing import Any, ClassVar

from neuroevo.envs.base import ActionSpec, ObservationSpec
from neuroevo.models.layers import Conv2D, Dense, Flatten, PopulationLayer
from neuroevo.models.params import NatureParams
from neuroevo.models.sequential import SequentialModel


class _ImageConvNet(SequentialModel):
    """Convolutions (SAME padding), a flatten and one dense hidden layer, relu throughout, then
    the action head; subclasses give the sizes."""

    params_class = NatureParams
    model_name: ClassVar[str]
    """The registry name, for messages."""
    convs: ClassVar[tuple[tuple[int, int, int], ...]]
    """(filters, kernel size, stride) of each convolution, in order."""
    hidden_units: ClassVar[int]
    """Width of the dense hidden layer."""

    def __init__(
        self,
        num_slots: int,
        observation_spec: ObservationSpec,
        action_spec: ActionSpec,
        **options: Any,
    ):
        if len(observation_spec.shape) != 3:
            raise ValueError(
                f"{self.model_name} expects image observations [height, width, channels], got "
                f"shape {list(observation_spec.shape)}; use 'mlp' for vector observations"
            )
        layers: list[PopulationLayer] = [
            Conv2D(filters, kernel, stride, name=f"conv{i}")
            for i, (filters, kernel, stride) in enumerate(self.convs, 1)
        ]
        layers += [Flatten(name="flatten"), Dense(self.hidden_units, name="fc")]
        super().__init__(num_slots, observation_spec, action_spec, layers, **options)


class NatureLarge(_ImageConvNet):
    """The DQN "Nature" network, one per slot. Options as in ``SequentialModel``."""

    model_name = "nature_large"
    convs = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
    hidden_units = 512


class NatureSmall(_ImageConvNet):
    """The smaller Atari network of the random-search experiments, one per slot."""

    model_name = "nature_small"
    convs = ((16, 8, 4), (32, 4, 2))
    hidden_units = 256
