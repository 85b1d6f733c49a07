"""The graph functions of an evaluator, traced once and shared by its workers and by both
rollout paths: the per-step worker (``evaluation.worker``) calls ``step`` and ``refill`` once
per agent step; the in-graph rollout (``evaluation.rollout``) builds its loop from the same
pieces (``reset_slots``, ``observe_act``, the behaviour and flag reads), so the two paths
compute the same episodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from neuroevo.envs.base import BatchedEnv
from neuroevo.evaluation.action_noise import standard_normal_noise
from neuroevo.evaluation.behavior import BehaviorKind, BehaviorParams, TrajectoryBuffer
from neuroevo.models.base import PopulationModel


class StepFunctions:
    """The graph functions workers call, traced once per evaluator and shared by its workers.

    Index vectors have unknown length in the signatures, so no call ever retraces. Env ops are
    pinned to ``env_device`` (the C++ envs run on the CPU); forward passes and weight loads to
    ``model_device``. ``observing()`` gives variants of ``step`` and ``refill`` that also return
    the observations, traced on first use: most evaluations never copy observations out.
    ``behavior`` chooses the behaviour characterisation read at each episode's end (final by
    default).

    With continuous actions, ``refill`` also sets each slot's action noise std (a scalar for
    the refilled episodes); every action then gets ``std * standard_normal_noise(episode seed,
    step)`` added in the graph (``action_noise``), so noisy episodes replay exactly. The
    per-slot seed, step and std live in variables, like the env's own state.
    """

    def __init__(
        self,
        env: BatchedEnv,
        model: PopulationModel,
        model_device: str,
        env_device: str = "/CPU:0",
        behavior: BehaviorParams | None = None,
    ):
        self._env = env
        self._model = model
        self._env_device = env_device
        self._model_device = model_device
        spec = env.action_spec
        self.action_shape: tuple[int, ...] = () if spec.discrete else tuple(spec.shape)
        self.action_dtype = np.dtype(spec.dtype.as_numpy_dtype)
        self.obs_size = int(np.prod(env.observation_spec.shape))
        self.num_params = model.num_params
        self.has_action_noise = not spec.discrete
        if self.has_action_noise:
            with tf.device(env_device):
                zeros = tf.zeros([env.num_slots], tf.int64)
                self._noise_seed = tf.Variable(zeros, trainable=False)
                self._noise_step = tf.Variable(zeros, trainable=False)
                self._noise_std = tf.Variable(tf.zeros([env.num_slots]), trainable=False)
        indices = tf.TensorSpec([None], tf.int32)
        steps = tf.TensorSpec([None], tf.int64)  # agent steps taken, the current one included
        final = self._trace(self._behavior, indices)
        self.has_behavior = final.structured_outputs is not None
        self._trajectory: TrajectoryBuffer | None = None
        if self.has_behavior and behavior is not None and behavior.kind is BehaviorKind.TRAJECTORY:
            out = final.structured_outputs
            bc_spec = tf.TensorSpec(out.shape, out.dtype)
            self._trajectory = TrajectoryBuffer(behavior, env.num_slots, bc_spec)
            self._read_behavior = self._trace(self._read_trajectory, indices, steps)
        else:
            self._read_behavior = self._trace(lambda i, s: self._behavior(i), indices, steps)
        self._step_signature = (
            indices,
            tf.TensorSpec([None, *self.action_shape], spec.dtype),  # actions
            tf.TensorSpec([None], tf.bool),  # act_mask
            steps,
        )
        self._refill_signature = (
            indices,
            tf.TensorSpec([None, model.num_params], tf.float32),  # params
            tf.TensorSpec([None], tf.int64),  # seeds
            tf.TensorSpec([], tf.float32),  # action noise std (continuous actions only)
        )
        self.step, self.refill = self._trace_step_refill(with_obs=False)
        self._observing: tuple[Any, Any] | None = None
        self.flags = self._trace(self._flags, indices)
        self.has_flags = self.flags.structured_outputs is not None

    def observing(self) -> tuple[Any, Any]:
        """``(step, refill)`` that also return the observations the networks acted on (last
        output); traced on the first call, which must come before workers start."""
        if self._observing is None:
            self._observing = self._trace_step_refill(with_obs=True)
        return self._observing

    def _trace_step_refill(self, with_obs: bool) -> tuple[Any, Any]:
        step = self._trace(
            lambda i, a, m, s: self._step(i, a, m, s, with_obs), *self._step_signature
        )
        refill = self._trace(
            lambda i, p, s, n: self._refill(i, p, s, n, with_obs), *self._refill_signature
        )
        return step, refill

    @staticmethod
    def _trace(fn: Callable[..., Any], *signature: tf.TensorSpec) -> Any:
        # Calling the concrete function skips tf.function's argument matching on every call.
        return tf.function(fn, input_signature=signature, autograph=False).get_concrete_function()

    def _observe_act(
        self, indices: tf.Tensor, noise: bool = True
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Actions of the listed slots (with action noise unless ``noise`` is False), the wall
        time when their observations were ready, and the observations."""
        with tf.device(self._env_device):
            obs = self._env.observation(indices)
        with tf.control_dependencies([obs]):
            observed = tf.timestamp()
        with tf.device(self._model_device), tf.control_dependencies([observed]):
            actions = self._model.act(indices, obs)
        if noise and self.has_action_noise:
            actions = self._add_action_noise(indices, actions)
        return actions, observed, obs

    def _add_action_noise(self, indices: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        """``actions`` plus each slot's std times its episode's noise for its current step;
        advances the slots' step counters."""
        with tf.device(self._env_device):
            step = tf.gather(self._noise_step, indices)
            size = int(np.prod(self.action_shape))
            noise = standard_normal_noise(tf.gather(self._noise_seed, indices), step, size)
            std = tf.gather(self._noise_std, indices)[:, None]
            noisy = actions + tf.reshape(std * noise, tf.shape(actions))
            advanced = self._noise_step.scatter_update(tf.IndexedSlices(step + 1, indices))
        with tf.control_dependencies([advanced]):
            return tf.identity(noisy)

    def _step(
        self,
        indices: tf.Tensor,
        actions: tf.Tensor,
        act_mask: tf.Tensor,
        steps: tf.Tensor,
        with_obs: bool,
    ):
        """Steps ``indices`` with ``actions``; computes the next actions where ``act_mask`` and
        the episode goes on. ``steps`` (agent steps taken once this one is done) tells the
        trajectory buffer which slots to sample.

        Returns:
            reward float32 [k], terminated bool [k], truncated bool [k], frames int64 [k],
            next actions ``[m, *action_shape]`` for the continuing slots in order, float64
            [3] wall-clock times: start, envs observed, forward done; with ``with_obs`` also
            the continuing slots' observations ``[m, *obs_shape]``.
        """
        start = tf.timestamp()
        with tf.device(self._env_device), tf.control_dependencies([start]):
            result = self._env.step(indices, actions)
            stepped = [result.reward, result.terminated, result.truncated]
            if self._trajectory is not None:
                with tf.control_dependencies(stepped):
                    stepped.append(self._trajectory.record(indices, steps, self._env.behavior))
            with tf.control_dependencies(stepped):
                frames = self._env.frames(indices)
        go_on = act_mask & ~result.terminated & ~result.truncated
        next_indices = tf.boolean_mask(indices, go_on)

        obs_spec = self._env.observation_spec

        def observe_act():
            actions, observed, obs = self._observe_act(next_indices)
            with tf.control_dependencies([actions]):
                return actions, observed, tf.timestamp(), obs

        def nothing():
            with tf.control_dependencies([frames]):
                now = tf.timestamp()
            no_actions = tf.zeros([0, *self.action_shape], actions.dtype)
            return no_actions, now, now, tf.zeros([0, *obs_spec.shape], obs_spec.dtype)

        # When every slot ends, no env or model call sees an empty index vector.
        with tf.control_dependencies([frames]):
            next_actions, observed, done, obs = tf.cond(
                tf.size(next_indices) > 0, observe_act, nothing
            )
        times = tf.stack([start, observed, done])
        outputs = (result.reward, result.terminated, result.truncated, frames, next_actions, times)
        return (*outputs, obs) if with_obs else outputs

    def _refill(
        self,
        indices: tf.Tensor,
        params: tf.Tensor,
        seeds: tf.Tensor,
        noise_std: tf.Tensor,
        with_obs: bool,
    ):
        """Loads weights into and resets the listed slots (env and recurrent model state);
        returns their frames and actions (and with ``with_obs`` their observations)."""
        with tf.device(self._model_device):
            self._model.load(indices, params)
            cleared = self._model.reset_state(indices)
        # The recurrent state is cleared before the first forward pass of the new episode.
        with tf.control_dependencies([] if cleared is None else [cleared]):
            frames = self.reset_slots(indices, seeds, noise_std)
        with tf.control_dependencies([frames]):
            actions, _, obs = self._observe_act(indices)
        return (frames, actions, obs) if with_obs else (frames, actions)

    def reset_slots(self, indices: tf.Tensor, seeds: tf.Tensor, noise_std: tf.Tensor) -> tf.Tensor:
        """Graph piece: starts new episodes in the listed slots (env reset, action-noise
        counters); returns their frames after the reset."""
        with tf.device(self._env_device):
            reset = self._env.reset(indices, seeds)
            updates = [] if reset is None else [reset]
            if self.has_action_noise:
                updates += [
                    self._noise_seed.scatter_update(tf.IndexedSlices(seeds, indices)),
                    self._noise_step.scatter_update(
                        tf.IndexedSlices(tf.zeros_like(seeds), indices)
                    ),
                    self._noise_std.scatter_update(
                        tf.IndexedSlices(tf.fill(tf.shape(indices), noise_std), indices)
                    ),
                ]
            with tf.control_dependencies(updates):
                return self._env.frames(indices)

    def observe_act(
        self, indices: tf.Tensor, noise: bool = True
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Graph piece: the listed slots' actions (with action noise unless ``noise`` is False:
        for evaluations whose noise std is 0), the time their observations were ready, and the
        observations."""
        return self._observe_act(indices, noise)

    def behavior_at_end(self, indices: tf.Tensor, steps: tf.Tensor) -> tf.Tensor:
        """Graph piece: the behaviour of the listed slots' just-ended episodes of ``steps``
        agent steps (final or trajectory, as chosen)."""
        if self._trajectory is not None:
            return self._read_trajectory(indices, steps)
        return self._behavior(indices)

    def flags_graph(self, indices: tf.Tensor) -> tf.Tensor:
        """Graph piece: the env's end-of-episode flags of the listed slots."""
        return self._flags(indices)

    @property
    def env(self) -> BatchedEnv:
        return self._env

    @property
    def model(self) -> PopulationModel:
        return self._model

    @property
    def env_device(self) -> str:
        return self._env_device

    @property
    def model_device(self) -> str:
        return self._model_device

    @property
    def trajectory(self) -> TrajectoryBuffer | None:
        return self._trajectory

    @property
    def read_behavior_function(self) -> Any:
        """The traced behaviour reader (its ``structured_outputs`` give the shape)."""
        return self._read_behavior

    def _behavior(self, indices: tf.Tensor):
        with tf.device(self._env_device):
            return self._env.behavior(indices)

    def _read_trajectory(self, indices: tf.Tensor, steps: tf.Tensor) -> tf.Tensor:
        assert self._trajectory is not None
        with tf.device(self._env_device):
            return self._trajectory.read(indices, steps, self._env.behavior(indices))

    def read_behavior(self, indices: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Behaviour of the listed slots' just-ended episodes of ``steps`` agent steps:
        ``[k, *bc_shape]`` (final) or ``[k, samples, *bc_shape]`` (trajectory)."""
        return self._read_behavior(indices, steps).numpy()

    def _flags(self, indices: tf.Tensor):
        with tf.device(self._env_device):
            return self._env.flags(indices)
