"""The ``behavior`` section of the training config: which behaviour characterisation the
evaluator records per episode. Kept apart from :mod:`neuroevo.evaluation.behavior` (the graph
side) so the config loads without TensorFlow."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from neuroevo.core.params import Params, check

__all__ = ["BehaviorKind", "BehaviorParams"]


class BehaviorKind(str, enum.Enum):
    """When the behaviour is read."""

    FINAL = "final"
    TRAJECTORY = "trajectory"


@dataclass(frozen=True)
class BehaviorParams(Params):
    """The ``behavior`` section of the training config.

    Attributes:
        kind: ``final`` (at episode end) or ``trajectory`` (sampled during the episode).
        every: Agent steps between two trajectory samples (the first is taken after
            ``every`` steps).
        samples: Samples per trajectory; an episode is described up to ``every * samples``
            steps, later steps are not sampled.
    """

    kind: BehaviorKind = BehaviorKind.FINAL
    every: int = 100
    samples: int = 10

    def _validate(self) -> None:
        check(self.every >= 1, "every", self.every, ">= 1")
        check(self.samples >= 1, "samples", self.samples, ">= 1")
