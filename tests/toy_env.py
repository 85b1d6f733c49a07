"""Test doubles for the evaluator: a pure-TF batched chain env and a linear population model.

Both keep their state in ``tf.Variable``s updated with scatter ops, so they are graph-friendly
and safe to call from several threads on disjoint slots, as the protocols require. Their
arithmetic is exact (small integers, multiples of 1/8), so results must match bit for bit
whatever the batch composition.
"""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf

from neuroevo.envs.base import ActionSpec, BatchedEnv, ObservationSpec, StepResult
from neuroevo.models.base import ParamSpec, PopulationModel

FRAME_SKIP = 4
BOUND = 4  # |position| reaching BOUND terminates the episode


def _sleep(seconds: tf.Tensor) -> np.int32:
    time.sleep(float(seconds))
    return np.int32(0)


class ChainEnv(BatchedEnv):
    """A walk on a line: action ``a`` in {0, 1, 2} moves the position by ``a - 1``.

    The seed sets the start position, a reward key and the env's own step cutoff
    (``3 + seed % 13``), and charges ``seed % 3`` "no-op" frames at reset; every step costs
    ``FRAME_SKIP`` frames. Rewards depend on the seed, time, position and action.

    Args:
        num_slots: slots.
        step_delay_s: extra CPU-free time per step call (a ``tf.py_function`` sleep), to make
            env steps take measurable time.
        poison_seed: stepping an episode reset with this seed raises InvalidArgumentError.
    """

    def __init__(self, num_slots: int, step_delay_s: float = 0.0, poison_seed: int = -1):
        self.num_slots = num_slots
        self.observation_spec = ObservationSpec((4,), tf.float32)
        self.action_spec = ActionSpec(discrete=True, num_actions=3)
        self._step_delay_s = step_delay_s
        self._poison_seed = poison_seed
        zeros = tf.zeros([num_slots], tf.int64)
        self._key = tf.Variable(zeros, trainable=False)
        self._pos = tf.Variable(zeros, trainable=False)
        self._t = tf.Variable(zeros, trainable=False)
        self._limit = tf.Variable(zeros, trainable=False)
        self._frames = tf.Variable(zeros, trainable=False)
        self._done = tf.Variable(tf.ones([num_slots], tf.bool), trainable=False)

    @staticmethod
    def _set(var: tf.Variable, indices: tf.Tensor, values: tf.Tensor) -> tf.Operation:
        return var.scatter_update(tf.IndexedSlices(values, indices))

    def reset(self, indices, seeds):
        seeds = tf.cast(seeds, tf.int64)
        return tf.group(
            self._set(self._key, indices, seeds),
            self._set(self._pos, indices, seeds % 5 - 2),
            self._set(self._t, indices, tf.zeros_like(seeds)),
            self._set(self._limit, indices, 3 + seeds % 13),
            self._set(self._frames, indices, seeds % 3),
            self._set(self._done, indices, tf.zeros_like(seeds, tf.bool)),
        )

    def step(self, indices, actions):
        tf.debugging.assert_equal(
            tf.reduce_any(tf.gather(self._done, indices)),
            False,
            message="stepped a slot whose episode is over",
        )
        key = tf.gather(self._key, indices)
        tf.debugging.assert_none_equal(
            key, tf.constant(self._poison_seed, tf.int64), message="poisoned seed"
        )
        delay = []  # the step's outputs wait for the delay, so it counts as env time
        if self._step_delay_s > 0:
            delay.append(tf.py_function(_sleep, [self._step_delay_s], tf.int32))
        with tf.control_dependencies(delay):
            pos = tf.gather(self._pos, indices)
        t = tf.gather(self._t, indices)
        action = tf.cast(actions, tf.int64)
        reward = tf.cast((key + 3 * t + pos * action) % 7, tf.float32) - 2.0
        reward += 0.5 * tf.cast(action, tf.float32)
        pos = pos + action - 1
        t = t + 1
        terminated = tf.abs(pos) >= BOUND
        truncated = ~terminated & (t >= tf.gather(self._limit, indices))
        with tf.control_dependencies(
            [
                self._set(self._pos, indices, pos),
                self._set(self._t, indices, t),
                self._set(self._done, indices, terminated | truncated),
                self._set(self._frames, indices, tf.gather(self._frames, indices) + FRAME_SKIP),
            ]
        ):
            return StepResult(tf.identity(reward), tf.identity(terminated), tf.identity(truncated))

    def observation(self, indices):
        pos = tf.cast(tf.gather(self._pos, indices), tf.float32)
        t = tf.cast(tf.gather(self._t, indices), tf.float32)
        key = tf.cast(tf.gather(self._key, indices) % 5, tf.float32)
        return tf.stack([pos, t / 4.0, key, tf.ones_like(pos)], axis=1)

    def frames(self, indices):
        return tf.gather(self._frames, indices)

    def behavior(self, indices):
        return tf.stack([tf.gather(self._pos, indices), tf.gather(self._t, indices)], axis=1)

    def flags(self, indices):
        """Bit 1: the walk left on the positive side; bit 2: it ended at an odd step."""
        pos, t = tf.gather(self._pos, indices), tf.gather(self._t, indices)
        return tf.cast(pos >= BOUND, tf.int32) + 2 * tf.cast(t % 2 == 1, tf.int32)


class LinearModel(PopulationModel):
    """``argmax(obs @ w + b)`` per slot, weights stored ``[slots, 4, 3]`` and ``[slots, 3]``."""

    def __init__(self, num_slots: int):
        self.num_slots = num_slots
        self.layout = (ParamSpec("w", (4, 3), 1.0), ParamSpec("b", (3,), 0.0))
        self._w = tf.Variable(tf.zeros([num_slots, 4, 3]), trainable=False)
        self._b = tf.Variable(tf.zeros([num_slots, 3]), trainable=False)

    def load(self, slots, flat_params):
        w = tf.reshape(flat_params[:, :12], [-1, 4, 3])
        self._w.scatter_update(tf.IndexedSlices(w, slots))
        self._b.scatter_update(tf.IndexedSlices(flat_params[:, 12:], slots))

    def forward(self, indices, obs):
        w = tf.gather(self._w, indices)
        return tf.einsum("kd,kda->ka", obs, w) + tf.gather(self._b, indices)

    def act(self, indices, obs):
        return tf.argmax(self.forward(indices, obs), axis=1, output_type=tf.int32)


def decode(genomes) -> np.ndarray:
    """Genome = an int seed; weights are multiples of 1/8 so the toy's arithmetic is exact."""
    rows = [np.random.default_rng(int(g)).integers(-8, 9, 15) / 8.0 for g in genomes]
    return np.asarray(rows, np.float32).reshape(len(rows), 15)


def reference_episode(genome: int, seed: int, max_steps: int | None) -> dict:
    """The same episode computed in plain Python, independent of any TF code."""
    w = decode([genome])[0]
    weights, bias = w[:12].reshape(4, 3).astype(np.float64), w[12:].astype(np.float64)
    pos, t, key, limit = seed % 5 - 2, 0, seed, 3 + seed % 13
    frames, ret, sign_ret = seed % 3, 0.0, 0.0
    observations = []
    while True:
        obs = np.array([pos, t / 4.0, key % 5, 1.0])
        observations.append(obs)
        action = int(np.argmax(obs @ weights + bias))
        reward = float((key + 3 * t + pos * action) % 7) - 2.0 + 0.5 * action
        ret += reward
        sign_ret += float(np.sign(reward))
        pos, t, frames = pos + action - 1, t + 1, frames + FRAME_SKIP
        terminated = abs(pos) >= BOUND
        truncated = not terminated and t >= limit
        if terminated or truncated or (max_steps is not None and t >= max_steps):
            return {
                "return": ret,
                "sign_return": sign_ret,
                "length": t,
                "frames": frames,
                "terminated": terminated,
                "truncated": not terminated,
                "behavior": (pos, t),
                "flags": int(pos >= BOUND) + 2 * (t % 2),
                "observations": np.array(observations),
            }


PROBE_MAX_STEPS = 8
PROBE_ACTION_SIZE = 3


class ActionProbeEnv(BatchedEnv):
    """Continuous actions ``[3]``, recorded verbatim: ``behavior`` returns every action of the
    episode, ``[PROBE_MAX_STEPS * 3]`` (zeros after its end). Episodes last ``2 + seed % 7``
    steps; the reward is the first action element (so its sign varies)."""

    def __init__(self, num_slots: int):
        self.num_slots = num_slots
        self.observation_spec = ObservationSpec((4,), tf.float32)
        bound = np.full(PROBE_ACTION_SIZE, 100.0, np.float32)
        self.action_spec = ActionSpec(
            discrete=False, shape=(PROBE_ACTION_SIZE,), low=-bound, high=bound
        )
        zeros = tf.zeros([num_slots], tf.int64)
        self._key = tf.Variable(zeros, trainable=False)
        self._t = tf.Variable(zeros, trainable=False)
        self._actions = tf.Variable(
            tf.zeros([num_slots, PROBE_MAX_STEPS, PROBE_ACTION_SIZE]), trainable=False
        )

    def reset(self, indices, seeds):
        seeds = tf.cast(seeds, tf.int64)
        return tf.group(
            self._key.scatter_update(tf.IndexedSlices(seeds, indices)),
            self._t.scatter_update(tf.IndexedSlices(tf.zeros_like(seeds), indices)),
            self._actions.scatter_update(
                tf.IndexedSlices(
                    tf.zeros([tf.size(indices), PROBE_MAX_STEPS, PROBE_ACTION_SIZE]), indices
                )
            ),
        )

    def step(self, indices, actions):
        t = tf.gather(self._t, indices)
        cells = tf.stack([tf.cast(indices, tf.int64), t], axis=1)
        recorded = self._actions.scatter_nd_update(cells, actions)
        advanced = self._t.scatter_update(tf.IndexedSlices(t + 1, indices))
        with tf.control_dependencies([recorded, advanced]):
            ended = t + 1 >= 2 + tf.gather(self._key, indices) % 7
            return StepResult(tf.identity(actions[:, 0]), ended, tf.zeros_like(ended))

    def observation(self, indices):
        t = tf.cast(tf.gather(self._t, indices), tf.float32)
        key = tf.cast(tf.gather(self._key, indices) % 5, tf.float32)
        return tf.stack([t, key, tf.ones_like(t), -tf.ones_like(t)], axis=1)

    def frames(self, indices):
        return tf.gather(self._t, indices)

    def behavior(self, indices):
        return tf.reshape(
            tf.gather(self._actions, indices), [-1, PROBE_MAX_STEPS * PROBE_ACTION_SIZE]
        )


class LinearContinuousModel(LinearModel):
    """``obs @ w + b`` per slot as a continuous action ``[3]``."""

    def act(self, indices, obs):
        return self.forward(indices, obs)


def reference_probe_actions(genome: int, seed: int) -> np.ndarray:
    """float64 ``[PROBE_MAX_STEPS, 3]``: the noise-free actions of a probe episode, computed in
    plain numpy (rows after the episode's end are zero)."""
    w = decode([genome])[0].astype(np.float64)
    weights, bias = w[:12].reshape(4, 3), w[12:]
    actions = np.zeros((PROBE_MAX_STEPS, PROBE_ACTION_SIZE))
    for t in range(2 + seed % 7):
        actions[t] = np.array([t, seed % 5, 1.0, -1.0]) @ weights + bias
    return actions
