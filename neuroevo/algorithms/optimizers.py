"""Centre optimizers: pure functions that turn an estimated ascent direction into a step.

Gradient-following strategies (ES, the novelty ES family, PGPE) pick one by name with the
``optimizer`` key of their section; each keeps two state vectors in its State, ``m`` and ``v``
(Adam's moments; the velocity of SGD-momentum and ClipUp lives in ``m``, ``v`` stays zero):

- ``adam`` (Kingma & Ba 2015): bias-corrected moments, ``learning_rate`` is the step size.
- ``sgd``: heavy-ball momentum, ``v_t = momentum * v_{t-1} + learning_rate * g``.
- ``clipup`` (Toklu, Liskowski & Srivastava 2020, "ClipUp: A Simple and Powerful Optimizer for
  Distribution-based Policy Evolution"): the gradient is normalised to length
  ``learning_rate``, added to the momentum-decayed velocity, and the velocity is clipped to
  norm ``max_speed`` (the paper's rule: ``max_speed = 2 * learning_rate``, the default when
  ``max_speed`` is null). Steps are bounded in Euclidean length whatever the fitness scale.

Every function returns ``(step, m, v)``; the caller adds ``step`` to the centre.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from neuroevo.core.params import Params, check, check_choice

__all__ = [
    "OPTIMIZERS",
    "CenterOptimizerParams",
    "adam_step",
    "center_step",
    "clipup_step",
    "momentum_step",
]

OPTIMIZERS = ("adam", "sgd", "clipup")
"""Names accepted by the ``optimizer`` key."""


@dataclass(frozen=True)
class CenterOptimizerParams(Params):
    """The centre optimizer's keys, in the section of every strategy that steps its centre with
    one (ES and its novelty family, PGPE); a strategy lists this class first among its bases
    and may change the defaults.

    Attributes:
        optimizer: ``adam``, ``sgd`` (with momentum) or ``clipup``.
        learning_rate: Step size of the centre optimizer (ClipUp's alpha).
        momentum: Momentum of ``sgd`` and ``clipup``.
        max_speed: ClipUp's maximum step length; null means ``2 * learning_rate``.
        beta1: Adam first-moment decay.
        beta2: Adam second-moment decay.
        adam_epsilon: Adam denominator offset.
    """

    optimizer: str = "adam"
    learning_rate: float = 0.01
    momentum: float = 0.9
    max_speed: float | None = None
    beta1: float = 0.9
    beta2: float = 0.999
    adam_epsilon: float = 1e-8

    def _validate_optimizer(self) -> None:
        check_choice(self.optimizer, OPTIMIZERS, "optimizer")
        check(self.learning_rate > 0, "learning_rate", self.learning_rate, "> 0")
        check(0 <= self.momentum < 1, "momentum", self.momentum, "in [0, 1)")
        speed = self.max_speed
        check(speed is None or speed > 0, "max_speed", speed, "> 0 (or null: 2 * learning_rate)")
        check(self.adam_epsilon > 0, "adam_epsilon", self.adam_epsilon, "> 0")
        for name in ("beta1", "beta2"):
            check(0 <= getattr(self, name) < 1, name, getattr(self, name), "in [0, 1)")


def adam_step(
    gradient: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    step_count: int,
    learning_rate: float,
    beta1: float,
    beta2: float,
    epsilon: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Adam ascent step (``step_count`` from 1, for the bias correction)."""
    m = beta1 * m + (1 - beta1) * gradient
    v = beta2 * v + (1 - beta2) * gradient * gradient
    rate = learning_rate * math.sqrt(1 - beta2**step_count) / (1 - beta1**step_count)
    return rate * m / (np.sqrt(v) + epsilon), m, v


def momentum_step(
    gradient: np.ndarray, velocity: np.ndarray, learning_rate: float, momentum: float
) -> tuple[np.ndarray, np.ndarray]:
    """One SGD-with-momentum ascent step; returns (step, new velocity), the same vector."""
    velocity = momentum * velocity + learning_rate * gradient
    return velocity, velocity


def clipup_step(
    gradient: np.ndarray,
    velocity: np.ndarray,
    learning_rate: float,
    momentum: float,
    max_speed: float,
) -> tuple[np.ndarray, np.ndarray]:
    """One ClipUp ascent step; returns (step, new velocity), the same vector.

    A zero gradient adds nothing (its direction is undefined).
    """
    norm = float(np.linalg.norm(gradient))
    velocity = momentum * velocity
    if norm > 0:
        velocity = velocity + (learning_rate / norm) * gradient
    speed = float(np.linalg.norm(velocity))
    if speed > max_speed:
        velocity = velocity * (max_speed / speed)
    return velocity, velocity


def center_step(
    params: CenterOptimizerParams,
    gradient: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    step_count: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The step of the optimizer ``params.optimizer``, in the dtype of ``m``.

    Returns:
        (step to add to the centre, new m, new v).
    """
    dtype = m.dtype
    gradient = gradient.astype(dtype, copy=False)
    if params.optimizer == "adam":
        step, m, v = adam_step(
            gradient,
            m,
            v,
            step_count,
            params.learning_rate,
            params.beta1,
            params.beta2,
            params.adam_epsilon,
        )
    elif params.optimizer == "sgd":
        step, m = momentum_step(gradient, m, params.learning_rate, params.momentum)
    else:
        speed = params.max_speed if params.max_speed is not None else 2 * params.learning_rate
        step, m = clipup_step(gradient, m, params.learning_rate, params.momentum, speed)
    return step.astype(dtype), m.astype(dtype), v.astype(dtype)
