"""The batched-environment protocol every environment backend implements.

A batched env owns ``num_slots`` independent environment instances ("slots"). Every call names
the slots it touches with an int32 index vector, so an evaluator can step only the episodes
that are still running and several threads can drive disjoint slot sets at once. The C++ ops
(Atari, MuJoCo) and the gymnasium adapter share this API, so the evaluator never knows which
one it drives.

Termination (the task ended: game over, robot fell) and truncation (the per-episode step cutoff)
stay distinguishable, as in gymnasium.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import numpy as np
import tensorflow as tf

from neuroevo.core.indices import check_num_slots, index_tensor
from neuroevo.envs.params import EnvParams


class CallbackError(ValueError):
    """User code that an env calls (a gymnasium env's ``behavior`` function) failed; the
    message is one line naming the function and what was wrong."""


@dataclasses.dataclass(frozen=True)
class ObservationSpec:
    """Shape (per slot, without the batch axis) and dtype of one observation."""

    shape: tuple[int, ...]
    dtype: tf.DType


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    """Discrete actions are int32 in ``[0, num_actions)``; continuous are float32 ``shape``.

    Continuous actions outside ``[low, high]`` are clipped by the env.
    """

    discrete: bool
    num_actions: int = 0
    shape: tuple[int, ...] = ()
    low: np.ndarray | None = None
    high: np.ndarray | None = None

    @property
    def dtype(self) -> tf.DType:
        return tf.int32 if self.discrete else tf.float32


class StepResult(NamedTuple):
    """Outputs of ``step`` for the ``k`` listed slots."""

    reward: tf.Tensor  # float32 [k], raw (unclipped) reward summed over repeated frames
    terminated: tf.Tensor  # bool [k], the episode ended by the task's own rule
    truncated: tf.Tensor  # bool [k], the episode hit its step cutoff


class BatchedEnv(abc.ABC):
    """``num_slots`` environments driven by index vectors; every method is graph-friendly.

    Contract shared by all backends:
      * ``indices`` are int32 ``[k]``, distinct, each in ``[0, num_slots)``; bad ones raise
        ``tf.errors.InvalidArgumentError`` naming the problem, and nothing is ever cast
        (``neuroevo.core.indices``: a float, an int64 beyond int32 or a wrong-dtype tensor is an
        error, not another slot).
      * After ``close``, every method raises ``EnvClosedError``.
      * ``reset`` must precede the first ``step`` of a slot and follow its last one: stepping a
        slot whose episode is over is an error.
      * Calls on disjoint index sets are safe from different threads at the same time.
      * The same seed gives the same episode for the same actions.

    A backend is registered in ``neuroevo.envs.ENV_KINDS`` and built by ``make_env`` as
    ``cls(env_id, num_slots, max_episode_steps=..., **options)``, with ``options`` the fields
    of its ``params_class`` (its ``env.<kind>`` config section).
    """

    params_class: ClassVar[type[EnvParams]]
    """The backend's options (an ``EnvParams``): defaults and validation, and what the
    backend gives (``discrete_actions``, ``image_observations``), declared once."""
    graph_rollout: ClassVar[bool] = False
    """Whether whole episodes may run inside one graph call (``evaluation.rollout``): every
    method is a TensorFlow op that needs no Python while it runs (a ``tf.numpy_function``
    backend needs the GIL on every step, so it keeps the per-step path)."""

    num_slots: int
    observation_spec: ObservationSpec
    action_spec: ActionSpec
    callback_error: CallbackError | None = None
    """The failure of user code behind the last failed op call, if that was the cause: the op
    itself reports only a TensorFlow error, so evaluators report this one instead."""

    @abc.abstractmethod
    def reset(self, indices: tf.Tensor, seeds: tf.Tensor) -> tf.Operation | None:
        """Starts a new episode in each listed slot.

        Args:
            indices: int32 ``[k]`` slot ids.
            seeds: int64 ``[k]`` episode seeds (no-op starts, sticky actions, reset noise).
        """

    @abc.abstractmethod
    def step(self, indices: tf.Tensor, actions: tf.Tensor) -> StepResult:
        """Advances each listed slot by one agent step.

        Args:
            indices: int32 ``[k]`` slot ids.
            actions: ``[k]`` int32 (discrete) or ``[k, *action_spec.shape]`` float32.
        """

    @abc.abstractmethod
    def observation(self, indices: tf.Tensor) -> tf.Tensor:
        """Current observation of each listed slot: ``[k, *observation_spec.shape]``."""

    @abc.abstractmethod
    def frames(self, indices: tf.Tensor) -> tf.Tensor:
        """int64 ``[k]``: emulator frames (Atari) or env steps used by the current episode."""

    def behavior(self, indices: tf.Tensor) -> tf.Tensor | None:
        """Optional behaviour characterisation (e.g. Atari RAM) for novelty search:
        ``[k, *bc_shape]`` for the listed slots, readable during and at the end of an
        episode."""
        del indices
        return None

    @property
    def provides_behavior(self) -> bool:
        """Whether ``behavior`` returns one (a backend that overrides it does)."""
        return type(self).behavior is not BatchedEnv.behavior

    def flags(self, indices: tf.Tensor) -> tf.Tensor | None:
        """Optional int32 ``[k]`` bit flags of how each listed slot's episode went (0: nothing
        to report); the evaluator records them at episode end. MuJoCo sets
        ``PHYSICS_WARNING`` and ``NAN_ACTION`` (``neuroevo.envs.mujoco``)."""
        del indices
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, most backends free on deletion
        """Releases the emulators; the default does nothing."""

    def _indices(self, indices: object) -> tf.Tensor:
        """``indices`` as an int32 tensor, checked by ``neuroevo.core.indices.index_tensor``."""
        return index_tensor(indices, self.num_slots)


class EnvClosedError(ValueError):
    """A method of a batched env was called after its ``close``."""

    def __init__(self, env: object):
        super().__init__(f"{env!r} is closed; make a new env to continue")


class OpEnv(BatchedEnv):
    """A batched env whose slots live in one resource of a C++ op library (Atari, MuJoCo).

    The constructor is the registry's (``cls(env_id, num_slots, max_episode_steps=...,
    **options)``): it checks ``num_slots`` and reads ``options`` into ``params_class``, then
    the backend's ``_open`` makes the resource. The raw ops take ``handle``; ``close`` drops
    this object's handle, and the slots are freed with the last reference to it (a
    ``tf.function`` that captured it keeps its own).
    """

    graph_rollout: ClassVar[bool] = True

    def __init__(
        self,
        env_id: str,
        num_slots: int,
        *,
        max_episode_steps: int | None = None,
        **options: Any,
    ) -> None:
        self.num_slots = check_num_slots(num_slots)
        self.options = self.params_class(**options)
        self._handle: tf.Tensor | None = self._open(env_id, max_episode_steps)

    @abc.abstractmethod
    def _open(self, env_id: str, max_episode_steps: int | None) -> tf.Tensor:
        """Checks ``env_id`` and the cutoff, makes the slots' resource (eagerly, under
        ``tf.init_scope``: it must outlive any ``tf.function`` being traced), sets the specs
        and returns the resource's handle."""

    @property
    def handle(self) -> tf.Tensor:
        """The resource handle of the slots (for the raw ops in ``neuroevo.ops``)."""
        if self._handle is None:
            raise EnvClosedError(self)
        return self._handle

    def close(self) -> None:
        """Drops this object's handle; the slots are freed with the last reference to it."""
        self._handle = None


@runtime_checkable
class RecordsVideo(Protocol):
    """An env whose slots can be filmed: real RGB frames and the rate they play at."""

    video_fps: float
    """Agent steps per second of game time (e.g. 60 / frame_skip for Atari)."""

    def screen(self, indices: Any, rgb: bool = False) -> tf.Tensor:
        """uint8 ``[k, height, width, 3]`` current frames of the listed slots when ``rgb``."""
