"""Batched environments behind one protocol (``BatchedEnv``) and a small registry.

``make_env(kind, env_id, num_slots, **options)`` builds any registered kind, so configs and the CLI
name an env by ``(kind, id)`` and the evaluator never imports a backend. Each entry imports its
backend lazily: asking for ``"atari"`` never loads MuJoCo, and vice versa.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from neuroevo.envs.base import ActionSpec, BatchedEnv, ObservationSpec, StepResult

__all__ = [
    "ENV_KINDS",
    "ActionSpec",
    "BatchedEnv",
    "ObservationSpec",
    "StepResult",
    "make_env",
]


def _atari(env_id: str, num_slots: int, **options: Any) -> BatchedEnv:
    from neuroevo.envs.atari import AtariEnv

    return AtariEnv(env_id, num_slots, **options)


def _mujoco(env_id: str, num_slots: int, **options: Any) -> BatchedEnv:
    from neuroevo.envs.mujoco import MujocoEnv

    return MujocoEnv(env_id, num_slots, **options)


def _gym(env_id: str, num_slots: int, **options: Any) -> BatchedEnv:
    from neuroevo.envs.gym import GymEnv

    return GymEnv(env_id, num_slots, **options)


# kind -> factory(env_id, num_slots, **options). Backends add their entry here.
ENV_KINDS: dict[str, Callable[..., BatchedEnv]] = {
    "atari": _atari,
    "mujoco": _mujoco,
    "gym": _gym,
}


def make_env(kind: str, env_id: str, num_slots: int, **options: Any) -> BatchedEnv:
    """Builds ``num_slots`` slots of env ``env_id`` of backend ``kind``.

    Args:
        kind: a key of ``ENV_KINDS``, e.g. ``"atari"``.
        env_id: the backend's env id, e.g. ``"pong"`` for Atari.
        num_slots: number of independent env instances.
        **options: backend-specific keyword arguments (see each backend's class).

    Raises:
        ValueError: unknown ``kind``, or the backend rejected ``env_id`` or an option.
    """
    if kind not in ENV_KINDS:
        raise ValueError(f"unknown env kind {kind!r}; expected one of {sorted(ENV_KINDS)}")
    return ENV_KINDS[kind](env_id, num_slots, **options)
