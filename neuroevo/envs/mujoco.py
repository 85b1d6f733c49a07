"""MuJoCo locomotion tasks (gymnasium v5 semantics) stepped in C++ inside TensorFlow ops.

``MujocoEnv`` wraps the ``NeuroevoMujoco*`` ops of ``custom_ops/mujoco/``: one MJCF model,
loaded from the installed gymnasium package at run time, and ``num_slots`` simulations of it
stepped on TensorFlow's intra-op thread pool. Observations, rewards, terminations, frame skip,
reset noise and the episode cutoff follow gymnasium's ``<Task>-v5`` envs with their default
arguments (tests check them side by side), with these choices where gymnasium differs or has none:

* Actions are clipped to the control range, and the control cost is charged on the clipped
  action (gymnasium charges the raw one; both agree for actions inside the range).
* A NaN in a slot's action is rejected for that slot only: its episode ends (terminated,
  reward 0, flag ``NAN_ACTION``) without stepping; +-inf is clipped like any other value.
* A MuJoCo warning (bad qpos/qvel/qacc, contact overflow, ...) or a non-finite state ends the
  episode at that step with reward 0 and flag ``PHYSICS_WARNING``; other slots are untouched.
* Process-wide, from the first ``MujocoEnv`` on: MuJoCo's log goes to TensorFlow's log
  (warnings only at ``TF_CPP_MAX_VLOG_LEVEL=1``), never to ``MUJOCO_LOG.TXT``; and the clock
  callback ``mjcb_time`` that ``import mujoco`` installs is removed (it reads the clock
  inside every physics step, a large share of a small model's step time), so
  ``MjData.timer`` stays zero, in gymnasium's envs too.
* Reset noise is drawn from a generator seeded by the episode seed alone, so a seed gives the
  same episode on any slot and thread (not the same numbers as gymnasium's ``np_random``).

Behaviour (``behavior``): the world ``(x, y)`` of the root body (the torso), read from the
root joint's ``qpos`` in C++, as novelty search characterises a walker by where it ends.

Custom models: ``model_xml`` (``env.mujoco.model_xml``) replaces gymnasium's MJCF file with
the user's while the task (``env.id``) keeps its observation, reward and termination rules,
as gymnasium's ``xml_file`` argument does. The model must offer what the task reads (the
planar root joints rootx/rootz/rooty of Hopper, Walker2d and HalfCheetah; the free root joint
of Ant and Humanoid, on the torso); making the env names what is missing. A relative path is
looked up in the working directory, then among the models shipped in ``neuroevo/envs/assets/``
(``humanoid_trap.xml``: Uber's Humanoid deceptive trap, Conti et al. 2018).
"""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium
import tensorflow as tf

from neuroevo import ops
from neuroevo.core.indices import float_tensor, seed_tensor
from neuroevo.envs.base import ActionSpec, ObservationSpec, OpEnv, StepResult
from neuroevo.envs.params import MUJOCO_ASSETS, MujocoParams, resolve_model_xml

__all__ = [
    "MAX_EPISODE_STEPS",
    "NAN_ACTION",
    "PHYSICS_WARNING",
    "TASKS",
    "MujocoEnv",
    "MujocoParams",
    "model_path",
    "resolve_model_xml",
    "task_name",
]

MAX_EPISODE_STEPS = 1000
"""Default per-episode cutoff in agent steps (gymnasium's TimeLimit for the v5 tasks)."""

# Task name -> the gymnasium v5 env's model file in gymnasium/envs/mujoco/assets/.
TASKS: dict[str, str] = {
    "Ant": "ant.xml",
    "HalfCheetah": "half_cheetah.xml",
    "Hopper": "hopper.xml",
    "Humanoid": "humanoid.xml",
    "Walker2d": "walker2d_v5.xml",
}

ASSETS = MUJOCO_ASSETS

PHYSICS_WARNING = 1  # flag: the episode ended on a MuJoCo warning or a non-finite state
NAN_ACTION = 2  # flag: the episode ended on a NaN action


def task_name(task: str) -> str:
    """``"Hopper"`` for ``"Hopper"`` or ``"Hopper-v5"``; other versions are not implemented.

    Raises:
        ValueError: unknown task; the message lists the valid ones.
    """
    name = task.removesuffix("-v5")
    if name not in TASKS:
        raise ValueError(
            f"unknown MuJoCo task {task!r}; valid tasks: {', '.join(TASKS)} "
            "(optionally with the suffix -v5)"
        )
    return name


def model_path(task: str) -> Path:
    """The task's MJCF file inside the installed gymnasium package (never copied)."""
    path = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / TASKS[task_name(task)]
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the installed gymnasium {gymnasium.__version__} lacks its "
            "MuJoCo assets; reinstall it with `pip install 'gymnasium[mujoco]'`"
        )
    return path


class MujocoEnv(OpEnv):
    """``num_slots`` simulations of one MuJoCo locomotion task behind the batched-env API.

    Args:
        env_id: the task: ``"Ant"``, ``"HalfCheetah"``, ``"Hopper"``, ``"Humanoid"`` or
            ``"Walker2d"`` (a ``-v5`` suffix is accepted).
        num_slots: number of independent simulations.
        max_episode_steps: episode cutoff in agent steps (truncation); 0 disables it; None
            (default) is gymnasium's 1000.
        **options: the fields of :class:`MujocoParams`.

    Raises:
        ValueError: unknown task, bad sizes (``num_slots`` at most
            ``neuroevo.core.indices.MAX_SLOTS``), a ``model_xml`` that is not a readable file, or
            the op rejected a setting, could not load the model (not MJCF, truncated, a
            missing ``<include>``) or the model lacks a joint the task reads (the message
            names the setting and the op's reason).
        tf.errors.ResourceExhaustedError: the slots' MuJoCo memory does not fit the process's
            address-space limit (``ulimit -v``); checked before any slot is made.
    """

    params_class = MujocoParams
    options: MujocoParams

    def _open(self, env_id: str, max_episode_steps: int | None) -> tf.Tensor:
        if max_episode_steps is None:
            max_episode_steps = MAX_EPISODE_STEPS
        if max_episode_steps < 0:
            raise ValueError(f"max_episode_steps must be >= 0, got {max_episode_steps}")
        frame_skip, noise = self.options.frame_skip, self.options.reset_noise_scale
        self.task = task_name(env_id)
        xml = self.options.model_xml
        self.model_path = model_path(self.task) if xml is None else resolve_model_xml(xml)
        self._ops = ops.load("mujoco")
        with tf.init_scope():  # the handle must outlive any tf.function that makes the env
            try:
                handle = self._ops.neuroevo_mujoco_make(
                    task=self.task,
                    xml_path=str(self.model_path),
                    num_slots=self.num_slots,
                    frame_skip=frame_skip or 0,
                    reset_noise_scale=-1.0 if noise is None else noise,
                    max_episode_steps=max_episode_steps,
                    terminate_when_unhealthy=self.options.terminate_when_unhealthy,
                )
            except tf.errors.InvalidArgumentError as exc:  # a model MuJoCo or the task rejects
                raise ValueError(self._make_error(exc)) from None
            obs_size, nq, nv, low, high = self._ops.neuroevo_mujoco_describe(handle)
        self.nq, self.nv = int(nq), int(nv)
        self.observation_spec = ObservationSpec((int(obs_size),), tf.float32)
        self.action_spec = ActionSpec(
            discrete=False, shape=(int(low.shape[0]),), low=low.numpy(), high=high.numpy()
        )
        return handle

    def _make_error(self, exc: tf.errors.InvalidArgumentError) -> str:
        """The make op's refusal as a user error: which setting, and the op's own reason."""
        reason = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\].*$", "", exc.message)
        reason = " ".join(reason.split())
        if self.options.model_xml is None:
            return f"env.mujoco: MuJoCo refused task {self.task}: {reason}"
        return (
            f"env.mujoco.model_xml: {self.model_path} cannot be used for {self.task}: {reason}; "
            "give a valid MJCF file that has the joints the task reads (docs/CONFIG.md)"
        )

    def reset(self, indices: tf.Tensor, seeds: tf.Tensor) -> tf.Operation | None:
        return self._ops.neuroevo_mujoco_reset(
            self.handle, self._indices(indices), seed_tensor(seeds)
        )

    def step(self, indices: tf.Tensor, actions: tf.Tensor) -> StepResult:
        return StepResult(
            *self._ops.neuroevo_mujoco_step(
                self.handle, self._indices(indices), float_tensor(actions, "actions")
            )
        )

    def observation(self, indices: tf.Tensor) -> tf.Tensor:
        obs = self._ops.neuroevo_mujoco_observation(self.handle, self._indices(indices))
        obs.set_shape([None, *self.observation_spec.shape])
        return obs

    def frames(self, indices: tf.Tensor) -> tf.Tensor:
        """int64 ``[k]``: agent steps of each listed slot's current (or last) episode."""
        return self._ops.neuroevo_mujoco_frames(self.handle, self._indices(indices))

    def flags(self, indices: tf.Tensor) -> tf.Tensor:
        """int32 ``[k]``: ``PHYSICS_WARNING`` / ``NAN_ACTION`` bits of the current episode."""
        return self._ops.neuroevo_mujoco_flags(self.handle, self._indices(indices))

    def behavior(self, indices: tf.Tensor) -> tf.Tensor:
        """float32 ``[k, 2]``: each listed slot's root (torso) ``(x, y)``, from its ``qpos``.

        Free-jointed robots (Ant, Humanoid) give their torso's position on the floor; the
        planar ones (Hopper, Walker2d, HalfCheetah) their x and y = 0.
        """
        return self._ops.neuroevo_mujoco_position(self.handle, self._indices(indices))

    def set_state(self, indices: tf.Tensor, qpos: tf.Tensor, qvel: tf.Tensor) -> tf.Operation:
        """Starts episodes from float64 joint states ``[k, nq]`` / ``[k, nv]`` (no noise).

        Equivalent to gymnasium's ``reset()`` followed by ``unwrapped.set_state(qpos, qvel)``;
        used by the parity tests and for replaying a recorded start.
        """
        return self._ops.neuroevo_mujoco_set_state(
            self.handle,
            self._indices(indices),
            tf.cast(qpos, tf.float64),
            tf.cast(qvel, tf.float64),
        )

    def __repr__(self) -> str:
        return f"MujocoEnv({self.task!r}, num_slots={self.num_slots})"
