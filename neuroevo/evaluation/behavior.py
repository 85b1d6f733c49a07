"""Which behaviour characterisation (BC) the evaluator records per episode, and the graph-side
trajectory buffer that samples it.

The env's ``behavior(indices)`` (Atari: the 128 RAM bytes; MuJoCo and the maze: the (x, y)
position; gymnasium: a user function of the final observation and info) is read either

- ``final``: once, when the episode ends (Uber's BC for Atari and Humanoid), giving
  ``[*bc_shape]`` per episode; or
- ``trajectory``: every ``every`` agent steps, into a fixed-length ``[samples, *bc_shape]``
  record per episode. The samples are written into a ``[slots, samples, *bc_shape]`` variable
  by the worker's step function, in the graph, for the slots that reached a sampling step;
  when an episode ends before its last sample, the remaining samples repeat its final
  behaviour (it stays where it ended).
"""

from __future__ import annotations

import tensorflow as tf

from neuroevo.evaluation.behavior_params import BehaviorKind, BehaviorParams

__all__ = ["BehaviorKind", "BehaviorParams", "TrajectoryBuffer"]


class TrajectoryBuffer:
    """The ``[slots, samples, *bc_shape]`` variable holding each running episode's samples.

    Args:
        options: ``every`` and ``samples``.
        num_slots: Env slots.
        spec: Shape ``[None, *bc_shape]`` and dtype of the env's ``behavior`` output.
    """

    def __init__(self, options: BehaviorParams, num_slots: int, spec: tf.TensorSpec) -> None:
        self._every = options.every
        self._samples = options.samples
        shape = [num_slots, options.samples, *spec.shape[1:]]
        self.buffer = tf.Variable(tf.zeros(shape, spec.dtype), trainable=False, name="trajectory")

    def record(self, indices: tf.Tensor, steps: tf.Tensor, behavior_fn) -> tf.Operation:
        """Stores ``behavior_fn(due)`` for the listed slots whose episode has just reached a
        sampling step; ``steps`` int64 [k] counts the agent steps taken, this one included."""
        sample = steps // self._every - 1
        due = tf.equal(steps % self._every, 0) & (sample < self._samples)
        due_indices = tf.boolean_mask(indices, due)

        def write():
            rows = behavior_fn(due_indices)
            where = tf.stack([tf.cast(due_indices, tf.int64), tf.boolean_mask(sample, due)], axis=1)
            return self.buffer.scatter_nd_update(where, rows).op

        return tf.cond(tf.size(due_indices) > 0, write, tf.no_op)

    def read(self, indices: tf.Tensor, steps: tf.Tensor, final: tf.Tensor) -> tf.Tensor:
        """``[k, samples, *bc_shape]`` trajectories of the listed ended episodes: the samples
        taken (``steps // every`` of them, at most ``samples``), then ``final`` repeated."""
        taken = tf.minimum(steps // self._every, self._samples)
        rows = tf.gather(self.buffer, indices)
        mask = tf.range(self._samples, dtype=tf.int64)[None, :] < taken[:, None]
        extra_dims = len(rows.shape) - 2
        mask = tf.reshape(mask, tf.concat([tf.shape(mask), tf.ones([extra_dims], tf.int32)], 0))
        return tf.where(mask, rows, tf.expand_dims(final, 1))
