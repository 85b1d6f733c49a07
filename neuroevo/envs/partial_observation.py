"""Partially observed control tasks: memory benchmarks for recurrent policies.

``CartPoleNoVelocity`` is CartPole-v1 with the two velocities removed from the observation
(cart position and pole angle remain), a standard test of memory in reinforcement learning
(e.g. Meng et al. 2021, "Memory-based deep reinforcement learning for POMDPs"): a feedforward
policy sees one snapshot and cannot tell which way the pole is moving, a recurrent one can
infer it from successive observations. Registered with gymnasium as
``neuroevo/CartPoleNoVelocity-v1`` (500-step cutoff, as CartPole-v1) by ``register``, which
importing ``neuroevo.envs.gym`` calls, so configs use it like any id: ``env: {kind: gym, id:
neuroevo/CartPoleNoVelocity-v1}``.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

__all__ = [
    "CARTPOLE_NO_VELOCITY",
    "CartPoleNoVelocity",
    "make_cartpole_no_velocity",
    "register",
]

CARTPOLE_NO_VELOCITY = "neuroevo/CartPoleNoVelocity-v1"
KEPT = np.array([0, 2])  # cart position, pole angle (velocities 1 and 3 are dropped)


class CartPoleNoVelocity(gymnasium.ObservationWrapper):
    """Keeps only cart position and pole angle of a CartPole observation."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gymnasium.spaces.Box(
            space.low[KEPT], space.high[KEPT], dtype=space.dtype
        )

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation)[KEPT]


def make_cartpole_no_velocity(**kwargs: Any) -> gymnasium.Env:
    """CartPole-v1's dynamics without its time limit (gymnasium's registration adds it)."""
    from gymnasium.envs.classic_control import CartPoleEnv

    return CartPoleNoVelocity(CartPoleEnv(**kwargs))


def register() -> None:
    """Registers the tasks of this module with gymnasium (once; later calls do nothing)."""
    if CARTPOLE_NO_VELOCITY not in gymnasium.registry:
        gymnasium.register(
            CARTPOLE_NO_VELOCITY,
            entry_point="neuroevo.envs.partial_observation:make_cartpole_no_velocity",
            max_episode_steps=500,
        )
