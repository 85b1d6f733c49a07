"""Recurrent population layers (LSTM, GRU) and the ``lstm`` / ``gru`` policies built on them.

A policy sees one observation per agent step, so a recurrent layer here is a cell: each call
runs one time step for the listed slots, reading and advancing a per-slot hidden state held in
``[num_slots, units]`` variables beside the weights. ``reset`` (the model's ``reset_state``)
zeroes the state of the listed slots; the evaluator calls it whenever a slot starts an
episode, so a network never carries memory from one episode into the next.

The equations and gate orders are Keras' (``keras.layers.LSTM`` / ``GRU`` with their default
activations), so a Keras model's weights load unchanged (``neuroevo.models.keras``):

* LSTM, gates ``(i, f, c, o)``: ``z = x W + h U + b``; ``c' = sig(f) c + sig(i) tanh(c~)``;
  ``h' = sig(o) tanh(c')``.
* GRU, gates ``(z, r, h)``, ``reset_after`` (Keras' default): ``x W + b_in`` and
  ``h U + b_rec`` are computed apart and the reset gate scales the recurrent candidate term;
  without it, the reset gate scales ``h`` before its candidate matmul (the 2014 paper).

Parameter tensors, in layout order: ``kernel`` ``[gates * units, in]`` and
``recurrent_kernel`` ``[gates * units, units]`` (output-major like ``Dense``: Keras' kernels
transposed), then ``bias`` ``[gates * units]`` (GRU with ``reset_after``: ``[2, 3 * units]``,
input bias then recurrent bias). An LSTM's forget-gate bias is stored as its deviation from
``forget_bias`` (1 by default, Keras' ``unit_forget_bias``), so zero-mean initial weights start
with the forget gate open.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from neuroevo.core.params import take
from neuroevo.envs.base import ActionSpec, ObservationSpec
from neuroevo.models.base import ParamSpec
from neuroevo.models.layers import (
    PopulationLayer,
    _activation,
    _check_vector,
    _positive_int,
    indexed_matmul,
)
from neuroevo.models.mlp import hidden_layers
from neuroevo.models.params import GruParams, LstmParams, RecurrentParams
from neuroevo.models.sequential import SequentialModel

__all__ = ["GRU", "LSTM", "GruModel", "LstmModel", "RecurrentLayer"]


class RecurrentLayer(PopulationLayer):
    """One time step of a recurrent cell per call, for the listed slots; see the module doc.

    Args:
        units: size of the hidden state (and of the output).
        activation: the candidate / output activation (Keras ``activation``), default tanh.
        recurrent_activation: the gates' activation, default sigmoid.
        use_bias: whether the cell has biases.
        init_std: initial std of both kernels, times ``1/sqrt(fan_in)``.
        name: unique within the model.
    """

    gates = 0
    stateful = True
    state_names: tuple[str, ...] = ("h",)

    def __init__(
        self,
        units: int,
        activation: str | None = "tanh",
        recurrent_activation: str = "sigmoid",
        use_bias: bool = True,
        init_std: float = 1.0,
        name: str | None = None,
    ):
        super().__init__(name, None)
        self.units = _positive_int(units, f"{type(self).__name__} units")
        self.cell_activation = activation
        self._cell_fn = _activation(activation) or tf.identity
        self.recurrent_activation = recurrent_activation
        self._gate_fn = _activation(recurrent_activation) or tf.identity
        self.use_bias = bool(use_bias)
        self.init_std = float(init_std)
        self.state: dict[str, tf.Variable] = {}

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        _check_vector(f"{type(self).__name__} {self.name!r}", input_shape)
        return (self.units,)

    def _bias_shape(self) -> tuple[int, ...]:
        return (self.gates * self.units,)

    def param_specs(self, input_shape: tuple[int, ...]) -> tuple[ParamSpec, ...]:
        rows = self.gates * self.units
        specs = (
            ParamSpec("kernel", (rows, input_shape[0]), self.init_std / np.sqrt(input_shape[0])),
            ParamSpec("recurrent_kernel", (rows, self.units), self.init_std / np.sqrt(self.units)),
        )
        return (*specs, ParamSpec("bias", self._bias_shape(), 0.0)) if self.use_bias else specs

    def bias_offset(self) -> np.ndarray:
        """float32 constant added to the stored bias (zeros unless a cell says otherwise)."""
        return np.zeros(self._bias_shape(), np.float32)

    def _finish_build(self, variables: dict[str, tf.Variable], num_slots: int) -> None:
        self.recurrent_kernel = variables["recurrent_kernel"]
        self.state = {
            key: tf.Variable(
                tf.zeros([num_slots, self.units]), trainable=False, name=f"{self.name}/{key}"
            )
            for key in self.state_names
        }

    def reset(self, indices: tf.Tensor) -> list[tf.Operation]:
        zeros = tf.zeros(tf.stack([tf.size(indices), self.units]))
        return [v.scatter_update(tf.IndexedSlices(zeros, indices)) for v in self.state.values()]

    def _bias(self, indices: tf.Tensor) -> tf.Tensor:
        """``[k, *bias_shape]`` biases of the listed slots, offset included."""
        return tf.gather(self.bias, indices) + self.bias_offset()

    def _step(
        self, indices: tf.Tensor, x: tf.Tensor, state: dict[str, tf.Tensor]
    ) -> dict[str, tf.Tensor]:
        """The new state from inputs ``x`` ``[k, in]`` and the current ``state`` ``[k, units]``."""
        raise NotImplementedError

    def _recurrent(self, indices: tf.Tensor, h: tf.Tensor) -> tf.Tensor:
        """``h`` ``[k, units]`` times each slot's recurrent kernel: ``[k, gates * units]``."""
        return indexed_matmul(self.recurrent_kernel, indices, h[:, None], self.implementation)[:, 0]

    def __call__(self, indices: tf.Tensor, x: tf.Tensor, reference: bool = False) -> tf.Tensor:
        """One time step: ``[k, 1, in]`` -> ``[k, 1, units]``; advances the listed slots' state.

        Raises:
            ValueError: ``x`` holds more than one input per slot (a batch of observations per
                network, which a per-slot state cannot follow).
        """
        if reference or (x.shape[1] is not None and x.shape[1] != 1):
            raise ValueError(
                f"{type(self).__name__} {self.name!r} takes one input per slot and step, got "
                f"{x.shape[1]}"
            )
        state = {key: tf.gather(v, indices) for key, v in self.state.items()}
        projected = indexed_matmul(self.kernel, indices, x, self.implementation)[:, 0]
        new = self._step(indices, projected, state)
        updates = [
            self.state[key].scatter_update(tf.IndexedSlices(value, indices))
            for key, value in new.items()
        ]
        with tf.control_dependencies(updates):
            return tf.identity(new["h"])[:, None]


class LSTM(RecurrentLayer):
    """Long short-term memory (Hochreiter & Schmidhuber 1997) with Keras' gate order.

    Args:
        forget_bias: constant added to the forget gate's bias (1: Keras' ``unit_forget_bias``).
        Others: as :class:`RecurrentLayer`.
    """

    gates = 4
    state_names = ("h", "c")

    def __init__(self, units: int, *args: Any, forget_bias: float = 1.0, **kwargs: Any):
        super().__init__(units, *args, **kwargs)
        self.forget_bias = float(forget_bias)

    def bias_offset(self) -> np.ndarray:
        offset = np.zeros(self._bias_shape(), np.float32)
        offset[self.units : 2 * self.units] = self.forget_bias
        return offset

    def _step(
        self, indices: tf.Tensor, x: tf.Tensor, state: dict[str, tf.Tensor]
    ) -> dict[str, tf.Tensor]:
        z = x + self._recurrent(indices, state["h"])
        if self.use_bias:
            z = z + self._bias(indices)
        i, f, candidate, o = tf.split(z, 4, axis=-1)
        c = self._gate_fn(f) * state["c"] + self._gate_fn(i) * self._cell_fn(candidate)
        return {"h": self._gate_fn(o) * self._cell_fn(c), "c": c}


class GRU(RecurrentLayer):
    """Gated recurrent unit (Cho et al. 2014) with Keras' gate order ``(z, r, h)``.

    Args:
        reset_after: apply the reset gate after the recurrent matmul, with separate input and
            recurrent biases (Keras' default, the cuDNN variant); False: before it.
        Others: as :class:`RecurrentLayer`.
    """

    gates = 3

    def __init__(self, units: int, *args: Any, reset_after: bool = True, **kwargs: Any):
        super().__init__(units, *args, **kwargs)
        self.reset_after = bool(reset_after)

    def _bias_shape(self) -> tuple[int, ...]:
        size = self.gates * self.units
        return (2, size) if self.reset_after else (size,)

    def _step(
        self, indices: tf.Tensor, x: tf.Tensor, state: dict[str, tf.Tensor]
    ) -> dict[str, tf.Tensor]:
        h = state["h"]
        units = self.units
        input_bias = recurrent_bias = 0.0
        if self.use_bias:
            bias = self._bias(indices)
            if self.reset_after:
                input_bias, recurrent_bias = bias[:, 0], bias[:, 1]
            else:
                input_bias = bias
        x = x + input_bias
        x_z, x_r, x_h = tf.split(x, 3, axis=-1)
        if self.reset_after:
            inner = self._recurrent(indices, h) + recurrent_bias
            r_z, r_r, r_h = tf.split(inner, 3, axis=-1)
            z = self._gate_fn(x_z + r_z)
            r = self._gate_fn(x_r + r_r)
            candidate = self._cell_fn(x_h + r * r_h)
        else:
            kernel = tf.cast(tf.gather(self.recurrent_kernel, indices), tf.float32)
            r_zr = tf.linalg.matvec(kernel[:, : 2 * units], h)
            z = self._gate_fn(x_z + r_zr[:, :units])
            r = self._gate_fn(x_r + r_zr[:, units:])
            candidate = self._cell_fn(x_h + tf.linalg.matvec(kernel[:, 2 * units :], r * h))
        return {"h": z * h + (1.0 - z) * candidate}


class RecurrentModel(SequentialModel):
    """Dense layers of ``hidden_sizes``, one recurrent cell of ``units``, then the output layer.

    Observations must be float32 vectors. The cell's state is per slot and cleared by
    ``reset_state`` at each episode start (the evaluator does it); ``act`` / ``forward`` each
    advance it by one step.
    """

    cell: type[RecurrentLayer] = LSTM
    params_class: type[RecurrentParams] = RecurrentParams

    def __init__(
        self,
        num_slots: int,
        observation_spec: ObservationSpec,
        action_spec: ActionSpec,
        **options: Any,
    ):
        own = take(self.params_class, options)
        name = type(self).__name__
        layers = hidden_layers(name, observation_spec, own.hidden_sizes, own.activation)
        layers.append(self.cell(own.units, name=self.cell.__name__.lower()))
        super().__init__(num_slots, observation_spec, action_spec, layers, **options)


class LstmModel(RecurrentModel):
    """``model.name: lstm``: :class:`RecurrentModel` with an :class:`LSTM` cell."""

    cell = LSTM
    params_class = LstmParams


class GruModel(RecurrentModel):
    """``model.name: gru``: :class:`RecurrentModel` with a :class:`GRU` cell."""

    cell = GRU
    params_class = GruParams
