"""Population models from ``tf.keras`` models: evolve the network you already wrote in Keras.

``from_keras(keras_model, num_slots)`` maps a Keras ``Sequential`` model, or a functional model
that is a chain of single-input layers, onto population layers, layer by layer:

==========================================  ==================================================
Keras layer                                 population layer
==========================================  ==================================================
``Dense``                                   ``Dense`` (kernel transposed to ``[units, in]``)
``Conv2D`` (square kernel and stride,       ``Conv2D`` (same kernel layout)
channels last, no dilation or groups)
``Flatten``, ``Reshape``                    ``Flatten``, ``Reshape``
``Activation``, ``ReLU``, ``Softmax``       ``Activation`` (names in ``ACTIVATIONS``)
``LayerNormalization`` (last axis)          ``LayerNormalization`` (scale stored minus 1)
``MaxPooling2D``, ``AveragePooling2D``      ``Pool2D``
``GlobalMax/AveragePooling2D``              ``GlobalPool2D``
``LSTM``, ``GRU``                           ``LSTM``, ``GRU`` (kernels transposed; one step per
                                            call, state per slot)
``Dropout``                                 nothing (inference: the identity)
``InputLayer``                              nothing
==========================================  ==================================================

Any other layer, or a supported layer with an option the population layer lacks, raises a
``ValueError`` naming the layer, its class and what to change.

**Recurrent models.** A Keras model with an ``LSTM`` or ``GRU`` takes sequences
``[batch, time, *obs_shape]``; its population model takes one observation per ``act`` and
keeps each slot's state (``reset_state`` starts an episode). Step ``t`` of a slot equals the
Keras model run on that slot's first ``t + 1`` observations: its output at ``t`` with
``return_sequences=True``, its output with ``return_sequences=False``. Layers before the last
recurrent layer must act on each time step alone (``Dense``, activations,
``LayerNormalization``, ``Dropout``, recurrent layers).

**Initial weights.** A genome's initial weights are ``init_scales() * N(0, 1)`` (zero mean), so
the import turns each Keras initialiser into a per-tensor std, the variance it draws with:
``VarianceScaling`` and its presets (Glorot, He, LeCun; uniform, normal or truncated):
``sqrt(scale / n)`` with ``n`` the fan Keras uses (``fan_in``, ``fan_out`` or their mean, from
the Keras-shaped tensor); ``RandomNormal`` / ``TruncatedNormal``: ``stddev``;
``RandomUniform``: ``(maxval - minval) / sqrt(12)``; ``Orthogonal``: ``gain / sqrt(max(rows,
cols))``, the std of an entry of a random orthogonal matrix; ``Zeros``, ``Ones``,
``Constant``: 0. Their means are kept where the population layer stores a deviation
(``LayerNormalization``'s scale, around 1; an LSTM's forget-gate bias, around 1 with Keras'
``unit_forget_bias``); elsewhere initial weights are centred on 0. Any other initialiser gets
the std of the tensor's current values. The Keras model's actual weights are available as one
flat vector, ``model.keras_params(keras_model)``, to load into slots (``model.load``) or to
start a search from.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from neuroevo.envs.base import ActionSpec, ObservationSpec
from neuroevo.models.layers import (
    Activation,
    Conv2D,
    Dense,
    Flatten,
    GlobalPool2D,
    LayerNormalization,
    Pool2D,
    PopulationLayer,
    Reshape,
)
from neuroevo.models.params import ACTIVATIONS
from neuroevo.models.recurrent import GRU, LSTM, RecurrentLayer
from neuroevo.models.sequential import SequentialModel

__all__ = ["KerasModel", "from_keras"]

keras = tf.keras

PER_STEP_LAYERS = "Dense, activations, LayerNormalization, Dropout, LSTM and GRU"


class UnsupportedLayerError(ValueError):
    """A Keras layer (or one of its options) has no population counterpart."""

    def __init__(self, layer: Any, problem: str):
        super().__init__(f"Keras layer '{layer.name}' ({type(layer).__name__}): {problem}")


@dataclasses.dataclass
class _Converted:
    """One Keras layer's population layer, and how its Keras weights map onto our tensors."""

    keras_layer: Any
    layer: PopulationLayer
    to_ours: Callable[[list[np.ndarray]], list[np.ndarray]]
    init_stds: Callable[[list[np.ndarray]], list[float]]
    to_keras: Callable[[list[np.ndarray]], list[np.ndarray]] = list


def _activation_name(layer: Any, function: Any) -> str:
    name = getattr(function, "__name__", None)
    if name is None:
        name = keras.activations.serialize(function)
    if isinstance(name, dict):
        name = name.get("config", name.get("class_name"))
    name = {"swish": "silu"}.get(name, name)
    if name not in ACTIVATIONS:
        raise UnsupportedLayerError(
            layer, f"activation {name!r} is not supported; use one of {sorted(ACTIVATIONS)}"
        )
    return name


def _fans(shape: Sequence[int]) -> tuple[float, float]:
    """Keras' fan-in and fan-out of a kernel shape (``keras.initializers``' rule)."""
    if len(shape) < 1:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    if len(shape) == 2:
        return float(shape[0]), float(shape[1])
    receptive = math.prod(shape[:-2])
    return float(shape[-2] * receptive), float(shape[-1] * receptive)


def initial_std(initializer: Any, value: np.ndarray) -> float:
    """The std a Keras initialiser draws a tensor shaped like ``value`` with (module doc)."""
    init = keras.initializers
    shape = value.shape
    if isinstance(initializer, init.Zeros | init.Ones | init.Constant):
        return 0.0
    if isinstance(initializer, init.VarianceScaling):
        fan_in, fan_out = _fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[
            initializer.mode
        ]
        return math.sqrt(initializer.scale / max(1.0, n))
    if isinstance(initializer, init.RandomNormal | init.TruncatedNormal):
        return float(initializer.stddev)
    if isinstance(initializer, init.RandomUniform):
        return float(initializer.maxval - initializer.minval) / math.sqrt(12.0)
    if isinstance(initializer, init.Orthogonal):
        rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
        return float(initializer.gain) / math.sqrt(max(rows, shape[-1]))
    return float(np.std(value))


def _stds(*initializers: Any) -> Callable[[list[np.ndarray]], list[float]]:
    def stds(weights: list[np.ndarray]) -> list[float]:
        return [initial_std(i, w) for i, w in zip(initializers, weights, strict=True)]

    return stds


def _kernel_bias_stds(layer: Any) -> Callable[[list[np.ndarray]], list[float]]:
    """The stds of a layer's kernel and, with ``use_bias``, its bias."""
    inits = [layer.kernel_initializer] + ([layer.bias_initializer] if layer.use_bias else [])
    return _stds(*inits)


def _square(layer: Any, name: str, value: Sequence[int]) -> int:
    if len(set(value)) != 1:
        raise UnsupportedLayerError(
            layer, f"{name}={tuple(value)}: only square {name}s are supported"
        )
    return int(value[0])


def _channels_last(layer: Any) -> None:
    if getattr(layer, "data_format", "channels_last") != "channels_last":
        raise UnsupportedLayerError(layer, "only data_format='channels_last' is supported")


def _transposed(weights: list[np.ndarray]) -> list[np.ndarray]:
    """Keras kernels ``[in, out]`` -> ours ``[out, in]``; other tensors unchanged."""
    return [weights[0].T, *weights[1:]]


def _dense(layer: Any) -> _Converted:
    ours = Dense(
        layer.units,
        _activation_name(layer, layer.activation),
        use_bias=layer.use_bias,
        name=layer.name,
    )
    return _Converted(layer, ours, _transposed, _kernel_bias_stds(layer), _transposed)


def _conv2d(layer: Any) -> _Converted:
    _channels_last(layer)
    if tuple(layer.dilation_rate) != (1, 1) or getattr(layer, "groups", 1) != 1:
        raise UnsupportedLayerError(layer, "dilation_rate and groups must be 1")
    ours = Conv2D(
        layer.filters,
        _square(layer, "kernel_size", layer.kernel_size),
        _square(layer, "strides", layer.strides),
        layer.padding.upper(),
        _activation_name(layer, layer.activation),
        use_bias=layer.use_bias,
        name=layer.name,
    )
    return _Converted(layer, ours, list, _kernel_bias_stds(layer))


def _layer_norm(layer: Any) -> _Converted:
    axis = layer.axis if isinstance(layer.axis, list | tuple) else [layer.axis]
    rank = len(layer.input.shape) if hasattr(layer, "input") else None
    if len(axis) != 1 or (axis[0] != -1 and (rank is None or axis[0] != rank - 1)):
        raise UnsupportedLayerError(layer, f"axis={layer.axis}: only the last axis is supported")
    if getattr(layer, "rms_scaling", False):
        raise UnsupportedLayerError(layer, "rms_scaling=True is not supported")
    ours = LayerNormalization(layer.epsilon, layer.scale, layer.center, name=layer.name)

    def shift(by: float) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        def shifted(weights: list[np.ndarray]) -> list[np.ndarray]:
            return [weights[0] + by, *weights[1:]] if layer.scale else list(weights)

        return shifted

    inits = ([layer.gamma_initializer] if layer.scale else []) + (
        [layer.beta_initializer] if layer.center else []
    )
    return _Converted(layer, ours, shift(-1.0), _stds(*inits), shift(1.0))


def _pool(layer: Any, kind: str) -> _Converted:
    _channels_last(layer)
    ours = Pool2D(
        kind,
        tuple(layer.pool_size),
        tuple(layer.strides) if layer.strides is not None else None,
        layer.padding.upper(),
        name=layer.name,
    )
    return _Converted(layer, ours, list, _stds())


def _global_pool(layer: Any, kind: str) -> _Converted:
    _channels_last(layer)
    if getattr(layer, "keepdims", False):
        raise UnsupportedLayerError(layer, "keepdims=True is not supported")
    return _Converted(layer, GlobalPool2D(kind, name=layer.name), list, _stds())


def _recurrent(layer: Any, cell: type[RecurrentLayer]) -> _Converted:
    for option in ("go_backwards", "stateful", "return_state"):
        if getattr(layer, option, False):
            raise UnsupportedLayerError(layer, f"{option}=True is not supported")
    keras_cell = getattr(layer, "cell", layer)
    common = dict(
        activation=_activation_name(layer, keras_cell.activation),
        recurrent_activation=_activation_name(layer, keras_cell.recurrent_activation),
        use_bias=keras_cell.use_bias,
        name=layer.name,
    )
    if cell is LSTM:
        ours: RecurrentLayer = LSTM(
            keras_cell.units, forget_bias=float(keras_cell.unit_forget_bias), **common
        )
    else:
        ours = GRU(keras_cell.units, reset_after=keras_cell.reset_after, **common)
    offset = ours.bias_offset()

    def convert(sign: float) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        def converted(weights: list[np.ndarray]) -> list[np.ndarray]:
            kernels = [weights[0].T, weights[1].T]
            return [*kernels, weights[2] + sign * offset] if keras_cell.use_bias else kernels

        return converted

    inits = [keras_cell.kernel_initializer, keras_cell.recurrent_initializer]
    if keras_cell.use_bias:
        inits.append(keras_cell.bias_initializer)
    return _Converted(layer, ours, convert(-1.0), _stds(*inits), convert(1.0))


def _activation_layer(layer: Any, name: str) -> _Converted:
    return _Converted(layer, Activation(name, name=layer.name), list, _stds())


def _check_own_call(layer: Any) -> None:
    """Refuses a subclass of a supported layer that overrides ``call``: converting it as its
    base layer would silently compute something else."""
    supported = [cls for cls in _SUPPORTED if isinstance(layer, cls)]
    if supported and all(type(layer).call is not cls.call for cls in supported):
        base = supported[0].__name__
        raise UnsupportedLayerError(
            layer,
            f"a subclass of {base} with its own call(), which the population {base} would "
            f"not run; use a plain {base} (or one that only changes its constructor)",
        )


def _convert(layer: Any) -> _Converted | None:
    """The population counterpart of one Keras layer (None: nothing at inference)."""
    layers = keras.layers
    _check_own_call(layer)
    if isinstance(layer, layers.InputLayer | layers.Dropout):
        return None
    if isinstance(layer, layers.Dense):
        return _dense(layer)
    if isinstance(layer, layers.Conv2D) and type(layer) is layers.Conv2D:
        return _conv2d(layer)
    if isinstance(layer, layers.Flatten):
        _channels_last(layer)
        return _Converted(layer, Flatten(name=layer.name), list, _stds())
    if isinstance(layer, layers.Reshape):
        return _Converted(layer, Reshape(layer.target_shape, name=layer.name), list, _stds())
    if isinstance(layer, layers.Activation):
        return _activation_layer(layer, _activation_name(layer, layer.activation))
    if isinstance(layer, layers.ReLU):
        if layer.max_value is not None or layer.negative_slope != 0 or layer.threshold != 0:
            raise UnsupportedLayerError(layer, "only the plain ReLU (no max, slope, threshold)")
        return _activation_layer(layer, "relu")
    if isinstance(layer, layers.Softmax):
        axis = layer.axis if isinstance(layer.axis, int) else tuple(layer.axis)
        if axis not in (-1, (-1,)):
            raise UnsupportedLayerError(layer, "only axis=-1 is supported")
        return _activation_layer(layer, "softmax")
    if isinstance(layer, layers.LayerNormalization):
        return _layer_norm(layer)
    if isinstance(layer, layers.MaxPooling2D):
        return _pool(layer, "max")
    if isinstance(layer, layers.AveragePooling2D):
        return _pool(layer, "avg")
    if isinstance(layer, layers.GlobalMaxPooling2D):
        return _global_pool(layer, "max")
    if isinstance(layer, layers.GlobalAveragePooling2D):
        return _global_pool(layer, "avg")
    if type(layer) is layers.LSTM:
        return _recurrent(layer, LSTM)
    if type(layer) is layers.GRU:
        return _recurrent(layer, GRU)
    raise UnsupportedLayerError(
        layer,
        "no population counterpart; supported: Dense, Conv2D, Flatten, Reshape, Activation, "
        "ReLU, Softmax, LayerNormalization, MaxPooling2D, AveragePooling2D, "
        "GlobalMax/AveragePooling2D, LSTM, GRU, Dropout",
    )


_SUPPORTED = tuple(
    getattr(keras.layers, name)
    for name in (
        "InputLayer",
        "Dropout",
        "Dense",
        "Conv2D",
        "Flatten",
        "Reshape",
        "Activation",
        "ReLU",
        "Softmax",
        "LayerNormalization",
        "MaxPooling2D",
        "AveragePooling2D",
        "GlobalMaxPooling2D",
        "GlobalAveragePooling2D",
        "LSTM",
        "GRU",
    )
)
"""The Keras layer classes :func:`_convert` maps (matched by ``isinstance``)."""


def _chain(keras_model: Any) -> list[Any]:
    """The model's layers in order, after checking they form one chain."""
    if not isinstance(keras_model, keras.Model):
        raise ValueError(
            f"from_keras needs a built tf.keras Model (Sequential or functional), got "
            f"{type(keras_model).__name__} {keras_model!r:.80}"
        )
    if not keras_model.built or not getattr(keras_model, "inputs", None):
        raise ValueError(
            "the Keras model has no input shape yet: give it a keras.Input (or call it once) "
            "before from_keras"
        )
    if len(keras_model.inputs) != 1 or len(keras_model.outputs) != 1:
        raise ValueError(
            f"the Keras model has {len(keras_model.inputs)} inputs and "
            f"{len(keras_model.outputs)} outputs; a policy has one of each"
        )
    layers = [
        layer for layer in keras_model.layers if not isinstance(layer, keras.layers.InputLayer)
    ]
    previous = keras_model.inputs[0]
    for layer in layers:
        if isinstance(layer, keras.Model):
            raise UnsupportedLayerError(layer, "nested models are not supported; flatten them")
        inputs = layer.input
        if isinstance(inputs, list | tuple | dict) or len(layer._inbound_nodes) != 1:
            raise UnsupportedLayerError(
                layer, "takes several inputs or is used twice; only chains of layers are supported"
            )
        if inputs is not previous:
            raise UnsupportedLayerError(
                layer,
                "does not take the previous layer's output; only chains of layers are supported",
            )
        previous = layer.output
    if previous is not keras_model.outputs[0]:
        raise ValueError("the Keras model's output is not its last layer's output")
    return layers


class KerasModel(SequentialModel):
    """A population model imported from a Keras model (see the module docstring).

    Attributes:
        keras_layers: the Keras layer names that became population layers, in order.
        recurrent: whether the model steps a per-slot state.
    """

    def __init__(
        self,
        num_slots: int,
        observation_spec: ObservationSpec,
        action_spec: ActionSpec,
        converted: Sequence[_Converted],
        **options: Any,
    ):
        self._converted = tuple(converted)
        self.keras_layers = tuple(c.keras_layer.name for c in converted)
        layers = [c.layer for c in converted]
        super().__init__(
            num_slots, observation_spec, action_spec, layers, output_layer=False, **options
        )
        self.recurrent = self.stateful
        stds: list[np.ndarray] = []
        for c in self._converted:
            weights = [np.asarray(w) for w in c.keras_layer.get_weights()]
            for std, spec in zip(c.init_stds(weights), c.layer.layout, strict=True):
                stds.append(np.full(spec.size, std, np.float32))
        self._init_scales = np.concatenate(stds) if stds else np.zeros(0, np.float32)

    def init_scales(self) -> np.ndarray:
        """float32 ``[num_params]``: the Keras initialisers' stds (module docstring)."""
        return self._init_scales.copy()

    def keras_params(self, keras_model: Any) -> np.ndarray:
        """float32 ``[num_params]``: a Keras model's current weights in this model's layout.

        Args:
            keras_model: the imported model, or another of the same architecture (e.g. the
                same model after ``set_weights``); layers are matched by name.
        """
        parts = []
        for c in self._converted:
            weights = [
                np.asarray(w, np.float64)
                for w in keras_model.get_layer(c.keras_layer.name).get_weights()
            ]
            ours = c.to_ours(weights)
            for value, spec in zip(ours, c.layer.layout, strict=True):
                if value.shape != spec.shape:
                    raise ValueError(
                        f"Keras layer '{c.keras_layer.name}' has a {list(value.shape)} tensor "
                        f"where {spec.name} is {list(spec.shape)}; is it the same architecture?"
                    )
                parts.append(value.astype(np.float32).ravel())
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def set_keras_params(self, keras_model: Any, flat_params: Any) -> None:
        """Writes flat weights (e.g. an evolved elite) into a Keras model of this architecture,
        the inverse of ``keras_params``.

        Args:
            keras_model: the imported model or another of the same architecture.
            flat_params: float ``[num_params]`` in this model's layout.
        """
        flat = np.asarray(flat_params, np.float32)
        if flat.shape != (self.num_params,):
            raise ValueError(f"flat_params must be [{self.num_params}], got {list(flat.shape)}")
        start = 0
        for c in self._converted:
            ours = []
            for spec in c.layer.layout:
                ours.append(flat[start : start + spec.size].reshape(spec.shape))
                start += spec.size
            keras_model.get_layer(c.keras_layer.name).set_weights(c.to_keras(ours))


def from_keras(
    keras_model: Any,
    num_slots: int,
    *,
    action_spec: ActionSpec | None = None,
    observation_spec: ObservationSpec | None = None,
    **options: Any,
) -> KerasModel:
    """Builds a population model of ``num_slots`` copies of a Keras model's architecture.

    Args:
        keras_model: a built ``tf.keras`` ``Sequential`` or functional model (one chain of
            the supported layers; module docstring).
        num_slots: networks held at once.
        action_spec: the env's action spec; its output count must equal the Keras model's
            last dimension. Default: discrete actions, one per output (argmax).
        observation_spec: default: float32 of the Keras input shape (without the time axis
            for a recurrent model). Pass the env's to check they agree.
        **options: what ``SequentialModel`` takes (``device``, ``dtype``, ``output``,
            ``implementation``).

    Returns:
        A :class:`KerasModel`; its slots start empty: ``load`` genomes' weights or
        ``model.keras_params(keras_model)``.

    Raises:
        ValueError: an unsupported layer or option (naming the layer), a model that is not a
            chain, or specs that do not fit the Keras model.

    Example:
        >>> import numpy as np
        >>> import tensorflow as tf
        >>> from neuroevo.models import from_keras
        >>> net = tf.keras.Sequential(
        ...     [tf.keras.Input((4,)), tf.keras.layers.Dense(8, "tanh"), tf.keras.layers.Dense(2)]
        ... )
        >>> model = from_keras(net, num_slots=3)
        >>> model.num_params, model.keras_layers
        (58, ('dense', 'dense_1'))
        >>> model.load([0], model.keras_params(net)[None])
        >>> obs = np.ones((1, 4), np.float32)
        >>> bool(np.allclose(model.forward([0], obs), net(obs), atol=1e-5))
        True
    """
    layers = _chain(keras_model)
    input_shape = tuple(keras_model.inputs[0].shape[1:])
    recurrent = any(type(layer) in (keras.layers.LSTM, keras.layers.GRU) for layer in layers)
    converted = []
    time_axis = recurrent
    for layer in layers:
        is_recurrent = type(layer) in (keras.layers.LSTM, keras.layers.GRU)
        per_step = is_recurrent or isinstance(
            layer,
            keras.layers.Dense
            | keras.layers.Activation
            | keras.layers.ReLU
            | keras.layers.Softmax
            | keras.layers.LayerNormalization
            | keras.layers.Dropout,
        )
        if time_axis and not per_step:
            raise UnsupportedLayerError(
                layer,
                "acts across the time axis; before the last recurrent layer only "
                f"{PER_STEP_LAYERS} may come",
            )
        if is_recurrent and not layer.return_sequences:
            time_axis = False
        item = _convert(layer)
        if item is not None:
            converted.append(item)
    obs_shape = input_shape[1:] if recurrent else input_shape
    if None in obs_shape:
        raise ValueError(
            f"the Keras input shape {input_shape} leaves an observation size open; give "
            "keras.Input a full shape (recurrent: (None, *obs_shape))"
        )
    spec = ObservationSpec(tuple(obs_shape), tf.float32)
    if observation_spec is not None and (
        tuple(observation_spec.shape) != spec.shape or observation_spec.dtype != tf.float32
    ):
        raise ValueError(
            f"the env observes {observation_spec.dtype.name} {list(observation_spec.shape)}"
            f" but the Keras model takes float32 {list(spec.shape)} per step"
        )
    outputs = keras_model.outputs[0].shape[-1]
    if action_spec is None:
        action_spec = ActionSpec(discrete=True, num_actions=int(outputs))
    return KerasModel(num_slots, spec, action_spec, converted, **options)
