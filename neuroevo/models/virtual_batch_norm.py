"""Virtual batch norm (Salimans et al. 2016) for population layers: per-slot statistics of a
fixed reference batch, recorded when a slot is loaded and only read by policy steps."""

from __future__ import annotations

import tensorflow as tf

__all__ = ["VBN_EPSILON", "VirtualBatchNorm", "per_slot"]

VBN_EPSILON = 1e-3


def per_slot(values: tf.Tensor, rank: int) -> tf.Tensor:
    """``[k, c]`` per-slot values shaped to broadcast against a ``[k, ...]`` tensor of ``rank``."""
    return tf.reshape(values, [-1] + [1] * (rank - 2) + [values.shape[-1]])


class VirtualBatchNorm:
    """Per-slot normalisation by statistics of a fixed reference batch (Salimans et al. 2016).

    The ES paper normalised Atari policies this way so a network's activations do not depend
    on the other observations of a batch. Statistics depend only on a slot's weights and the
    reference batch, so they are computed when a slot is loaded (``reference=True``) and stored
    as ``[num_slots, channels]`` variables; a policy step only reads them.
    """

    def __init__(self, num_slots: int, channels: int, name: str):
        self.mean = tf.Variable(
            tf.zeros([num_slots, channels]), trainable=False, name=f"{name}/mean"
        )
        self.inv_std = tf.Variable(
            tf.ones([num_slots, channels]), trainable=False, name=f"{name}/inv_std"
        )

    def __call__(self, indices: tf.Tensor, z: tf.Tensor, reference: bool) -> tf.Tensor:
        """Normalises ``z`` ``[k, m, ..., channels]``; with ``reference`` records its statistics."""
        if reference:
            mean, variance = tf.nn.moments(z, axes=list(range(1, z.shape.rank - 1)))
            inv_std = tf.math.rsqrt(variance + VBN_EPSILON)
            self.mean.scatter_update(tf.IndexedSlices(mean, indices))
            self.inv_std.scatter_update(tf.IndexedSlices(inv_std, indices))
        else:
            mean = tf.gather(self.mean, indices)
            inv_std = tf.gather(self.inv_std, indices)
        rank = z.shape.rank
        return (z - per_slot(mean, rank)) * per_slot(inv_std, rank)
