"""Batched environments behind one protocol (``BatchedEnv``) and the registry that builds them.

``make_env(kind, env_id, num_slots, **options)`` builds any registered kind, so configs and the
CLI name an env by ``(kind, id)`` and the evaluator never imports a backend. A backend is a
``BatchedEnv`` subclass whose ``params_class`` (an ``EnvParams``) declares its options and
what it gives; registering it (``ENV_KINDS.register(kind, "package.module:Class")``, see
:mod:`neuroevo.core.registry`) adds its kind to every choice list and its ``env.<kind>`` section to
the training config. Backends are imported, and op libraries loaded, only when an env is made:
importing this module (as the config does) imports neither TensorFlow nor any backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neuroevo.core.params import check_choice
from neuroevo.core.registry import Lazy, Registry, lazy_exports

if TYPE_CHECKING:
    from neuroevo.envs.base import (
        ActionSpec,
        BatchedEnv,
        ObservationSpec,
        RecordsVideo,
        StepResult,
    )

__all__ = [
    "ENV_KINDS",
    "ActionSpec",
    "BatchedEnv",
    "ObservationSpec",
    "RecordsVideo",
    "StepResult",
    "make_env",
]

ENV_KINDS = Registry(
    "env kind",
    {
        "atari": Lazy("neuroevo.envs.atari:AtariEnv", "neuroevo.envs.params:AtariParams"),
        "mujoco": Lazy("neuroevo.envs.mujoco:MujocoEnv", "neuroevo.envs.params:MujocoParams"),
        "gym": Lazy("neuroevo.envs.gym:GymEnv", "neuroevo.envs.params:GymParams"),
        "maze": Lazy("neuroevo.envs.maze:MazeEnv", "neuroevo.envs.params:MazeParams"),
    },
    entry_points="neuroevo.envs",
)
"""Env backends by config name (``env.kind``); each is imported when first built."""

__getattr__ = lazy_exports(
    __name__,
    {
        "neuroevo.envs.base": (
            "ActionSpec",
            "BatchedEnv",
            "ObservationSpec",
            "RecordsVideo",
            "StepResult",
        )
    },
)
"""The protocol types of ``envs.base``, imported (with TensorFlow) on first use."""


def make_env(
    kind: str,
    env_id: str,
    num_slots: int,
    *,
    max_episode_steps: int | None = None,
    **options: Any,
) -> BatchedEnv:
    """Builds ``num_slots`` slots of env ``env_id`` of backend ``kind``.

    Args:
        kind: a key of ``ENV_KINDS``, e.g. ``"atari"``.
        env_id: the backend's env id, e.g. ``"pong"`` for Atari.
        num_slots: number of independent env instances.
        max_episode_steps: per-episode cutoff in agent steps; None is the backend's default.
        **options: fields of the backend's ``params_class`` (e.g. ``AtariParams``).

    Raises:
        ValueError: unknown ``kind``, or the backend rejected ``env_id`` or an option.

    Example:
        >>> env = make_env("gym", "CartPole-v1", num_slots=2, threads=1)
        >>> env.reset([0, 1], seeds=[7, 7])
        >>> obs = env.observation([0, 1]).numpy()
        >>> obs.shape, bool((obs[0] == obs[1]).all())
        ((2, 4), True)
        >>> reward, terminated, truncated = env.step([0, 1], actions=[0, 1])
        >>> reward.numpy().tolist()
        [1.0, 1.0]
    """
    check_choice(kind, ENV_KINDS, "env kind")
    return ENV_KINDS[kind](env_id, num_slots, max_episode_steps=max_episode_steps, **options)
