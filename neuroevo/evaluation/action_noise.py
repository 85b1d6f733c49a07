"""Gaussian action noise drawn from the episode seed, inside the graph.

The ES starter (``evolution-strategies-starter``, ``policies.py``) adds ``ac_noise_std *
N(0, 1)`` to every action of its training rollouts. Here that noise must replay exactly (the
same seed gives the same episode, and a resumed run the same results), whatever worker, slot
or batch an episode lands in. TensorFlow's stateless random ops take one seed per call while
one step call acts for many episodes, each with its own stream, so the noise is a counter-based
generator evaluated elementwise instead: SplitMix64's output function (Steele, Lea & Flood
2014) hashes ``(episode key, counter)`` to 64 random bits, and two such draws make one standard
normal by the Box-Muller transform. The value for ``(seed, step, action dimension)`` depends
on nothing else.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

__all__ = ["standard_normal_noise"]

_GOLDEN_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment
_MIX_1 = 0xBF58476D1CE4E5B9
_MIX_2 = 0x94D049BB133111EB
_STREAM_SALT = 0xAC7102015E5EED5A
"""XORed into the episode seed, so this stream is unrelated to the env's use of the seed."""


def _u64(value: int) -> tf.Tensor:
    return tf.constant(value, tf.uint64)


def _mix(x: tf.Tensor) -> tf.Tensor:
    """SplitMix64's finaliser: a bijection of uint64 with full avalanche."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u64(30))) * _u64(_MIX_1)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u64(27))) * _u64(_MIX_2)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u64(31)))


def _uniform(key: tf.Tensor, counter: tf.Tensor) -> tf.Tensor:
    """float64 in (0, 1]: the top 53 bits of draw ``counter`` of the stream ``key``."""
    bits = _mix(key + (counter + _u64(1)) * _u64(_GOLDEN_GAMMA))
    return (tf.cast(tf.bitwise.right_shift(bits, _u64(11)), tf.float64) + 1.0) * 2.0**-53


def standard_normal_noise(seeds: tf.Tensor, steps: tf.Tensor, size: int) -> tf.Tensor:
    """Standard normal noise for action ``steps[i]`` of the episode with seed ``seeds[i]``.

    Args:
        seeds: int64 ``[k]``, episode seeds.
        steps: int64 ``[k]``, the agent step (0 for the action chosen at reset).
        size: elements of one action.

    Returns:
        float32 ``[k, size]``; draws for different ``(seed, step, element)`` are independent.
    """
    key = _mix(tf.bitwise.bitwise_xor(tf.bitcast(seeds, tf.uint64), _u64(_STREAM_SALT)))
    element = tf.constant(np.arange(size, dtype=np.uint64)[None, :])
    counter = 2 * (tf.bitcast(steps, tf.uint64)[:, None] * _u64(size) + element)
    radius = tf.sqrt(-2.0 * tf.math.log(_uniform(key[:, None], counter)))
    angle = (2.0 * math.pi) * _uniform(key[:, None], counter + _u64(1))
    return tf.cast(radius * tf.cos(angle), tf.float32)
