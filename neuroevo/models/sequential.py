"""A population model made of a stack of population layers and an action head.

``SequentialModel`` owns what every population network shares: placing the variables on one
device, the flat parameter layout, ``load``/``read`` of many slots at once, input checks, the
optional virtual batch norm and turning raw outputs into actions. ``nature.py`` and ``mlp.py``
only choose layers; a notebook can do the same::

    model = SequentialModel(64, obs_spec, act_spec, [Dense(64, "tanh"), Dense(64, "tanh")])

Flat parameter layout (stable; what optimizers and genomes see). One network's parameters are
one float32 vector: the tensors of ``layout`` in order, each flattened in C order. Layers come
in model order, each as ``<layer>/kernel`` then ``<layer>/bias``; the output layer ``out``
(``Dense(num_outputs)``, appended by the model) comes last. Conv kernels are
``[kh, kw, c_in, filters]``, dense kernels ``[units, in]``, ``Flatten`` orders features
(height, width, channel). Initial values are ``init_scales() * N(0, 1)``: kernel std
``init_std / sqrt(fan_in)`` (1.0 for hidden layers, 0.1 for the output layer, as in the deep
neuroevolution GPU code, uber-research/deep-neuroevolution ``models/dqn.py``), biases 0.

Placement: every variable and every op of ``act`` lives on ``device`` (default: the first GPU,
else the CPU). On CPU the layers read weights in place with the ``core`` custom ops; on other
devices they gather the listed slots' weights there. Weights never cross between host and
device after ``load``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf

from neuroevo.core.indices import index_tensor
from neuroevo.core.resources import check_memory
from neuroevo.envs.base import ActionSpec, ObservationSpec
from neuroevo.models.base import ParamSpec, PopulationModel
from neuroevo.models.layers import UINT8_SCALE, Conv2D, Dense, PopulationLayer, checked_indices
from neuroevo.models.params import DISCRETE_OUTPUTS, ModelParams, OwnModelParams

# Activation memory allowed per chunk of slots while computing reference-batch statistics.
REFERENCE_CHUNK_BYTES = 256 << 20


def resolve_device(device: str | None) -> str:
    """The full name of ``device`` (default: first GPU, else first CPU); ValueError if absent."""
    available = tf.config.list_logical_devices()
    if device is None:
        gpus = [d.name for d in available if d.device_type == "GPU"]
        return gpus[0] if gpus else next(d.name for d in available if d.device_type == "CPU")
    try:
        wanted = tf.DeviceSpec.from_string(device)
    except ValueError as exc:
        raise ValueError(f"cannot parse device {device!r}: {exc}") from exc
    for candidate in available:
        spec = tf.DeviceSpec.from_string(candidate.name)
        if (wanted.device_type or "").upper() == spec.device_type and (
            wanted.device_index or 0
        ) == spec.device_index:
            return candidate.name
    raise ValueError(
        f"device {device!r} is not available; logical devices: {[d.name for d in available]}"
    )


class SequentialModel(PopulationModel):
    """``num_slots`` networks of one layer stack, evaluated by slot index.

    Args:
        num_slots: networks held at once.
        observation_spec: per-slot observation; uint8 observations are scaled to [0, 1].
        action_spec: discrete actions come from an argmax over ``num_actions`` outputs,
            continuous ones from ``prod(shape)`` outputs squashed by ``output``.
        layers: hidden layers, unbuilt; unnamed ones are named by kind and position. The
            output layer is appended.
        device: where variables and the forward pass live (default: first GPU, else CPU).
        output_std: initial std (times 1/sqrt(fan_in)) of the output layer's kernel.
        implementation: ``"auto"`` (custom ops on CPU, gather elsewhere), ``"op"`` or
            ``"gather"``.
        output_layer: append the output layer ``Dense(num_outputs)``; False: ``layers``
            already end in one with ``num_outputs`` outputs (an imported Keras model).
        **options: the fields of :class:`ModelParams` (``output``, ``dtype``,
            ``virtual_batch_norm``).
    """

    params_class: ClassVar[type[OwnModelParams] | None] = None
    """The model's own options beyond :class:`ModelParams` (its ``model.<name>`` config
    section) and what it needs (``image_observations``), or None: none, and either kind of
    observation."""

    def __init__(
        self,
        num_slots: int,
        observation_spec: ObservationSpec,
        action_spec: ActionSpec,
        layers: Sequence[PopulationLayer],
        *,
        device: str | None = None,
        output_std: float = 0.1,
        implementation: str = "auto",
        output_layer: bool = True,
        **options: Any,
    ):
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"num_slots must be a positive integer, got {num_slots!r}")
        if isinstance(options.get("dtype"), tf.DType):
            options["dtype"] = options["dtype"].name
        self.options = ModelParams(**options)
        compute_dtype = tf.as_dtype(self.options.dtype)
        output = self.options.output
        if output is None:
            output = "argmax" if action_spec.discrete else "tanh"
        if (output in DISCRETE_OUTPUTS) != action_spec.discrete:
            raise ValueError(
                f"output={output!r} does not fit "
                f"{'discrete' if action_spec.discrete else 'continuous'} actions; use "
                f"{'argmax' if action_spec.discrete else 'tanh or clip'}"
            )
        if implementation not in ("auto", "op", "gather"):
            raise ValueError(
                f"implementation must be 'auto', 'op' or 'gather', got {implementation!r}"
            )
        self.num_slots = num_slots
        self.observation_spec = observation_spec
        self.action_spec = action_spec
        self.dtype = compute_dtype
        self.device = resolve_device(device)
        if implementation == "auto":
            device_type = tf.DeviceSpec.from_string(self.device).device_type
            implementation = "op" if device_type == "CPU" else "gather"
        self.implementation = implementation
        self.virtual_batch_norm = self.options.virtual_batch_norm
        self.output = output
        self.num_outputs = self._num_outputs(action_spec)
        self._low, self._high = self._action_bounds(action_spec, output)

        head = (Dense(self.num_outputs, None, output_std, name="out"),) if output_layer else ()
        self.layers = (*layers, *head)
        if not self.layers:
            raise ValueError("a model needs at least one layer")
        self._name_layers()
        self._check_fits_memory(tuple(observation_spec.shape), num_slots)
        with tf.device(self.device):
            shape = tuple(observation_spec.shape)
            self._input_shapes = []
            for layer in self.layers:
                self._input_shapes.append(shape)
                shape = layer.build(
                    shape, num_slots, compute_dtype, self.virtual_batch_norm, implementation
                )
        if math.prod(shape) != self.num_outputs:
            raise ValueError(
                f"the last layer gives {list(shape)} outputs per network but the action spec "
                f"needs {self.num_outputs}"
            )
        self.layout: tuple[ParamSpec, ...] = tuple(s for layer in self.layers for s in layer.layout)
        self._variables = tuple(v for layer in self.layers for v in layer.variables)
        self._reference: tf.Variable | None = None
        self._has_reference = False
        if self.virtual_batch_norm:
            obs_shape = tf.TensorShape([None, *observation_spec.shape])
            with tf.device(self.device):
                # A variable, so functions traced before set_reference_batch see its value.
                self._reference = tf.Variable(
                    tf.zeros([0, *observation_spec.shape], observation_spec.dtype),
                    shape=obs_shape,
                    trainable=False,
                    name="vbn_reference",
                )
        # Raw uint8 observations go straight into a first Conv2D's custom op, which scales
        # them as it builds patches: the values ``preprocess`` gives, without a float copy.
        self._raw_obs = (
            implementation == "op"
            and observation_spec.dtype == tf.uint8
            and isinstance(self.layers[0], Conv2D)
            and type(self).preprocess is SequentialModel.preprocess
        )
        self._reference_floats = max(
            layer.scratch_elements(shape)
            for layer, shape in zip(self.layers, self._input_shapes, strict=True)
        )

        obs_sig = tf.TensorSpec([None, *observation_spec.shape], observation_spec.dtype)
        slots_sig = tf.TensorSpec([None], tf.int32)
        self._forward_fn = tf.function(self._forward, input_signature=[slots_sig, obs_sig])
        self._act_fn = tf.function(
            lambda i, o: self._head(self._forward(i, o)), input_signature=[slots_sig, obs_sig]
        )
        flat_sig = tf.TensorSpec([None, self.num_params], tf.float32)
        self._load_fn = tf.function(self._load, input_signature=[slots_sig, flat_sig])
        self._read_fn = tf.function(self._read, input_signature=[slots_sig])
        self._reference_fn = tf.function(self._record_reference_stats, input_signature=[slots_sig])
        self.stateful = any(layer.stateful for layer in self.layers)
        """Whether the networks carry state from step to step (recurrent layers)."""

    def _check_fits_memory(self, obs_shape: tuple[int, ...], num_slots: int) -> None:
        """Counts the parameters from the layers' shapes alone and refuses weights that do not
        fit memory, before any variable is allocated (a typo in a layer size would otherwise
        be an allocation failure deep in TensorFlow)."""
        params, shape = 0, obs_shape
        for layer in self.layers:
            params += sum(math.prod(spec.shape) for spec in layer.param_specs(shape))
            shape = layer.output_shape(shape)
        check_memory(
            4 * num_slots * params,
            f"{num_slots:,} networks of {params:,} parameters "
            f"({' -> '.join(type(layer).__name__ for layer in self.layers)})",
            "use smaller layers (model.<name> options such as model.mlp.hidden_sizes) or fewer "
            "slots",
        )

    # ------------------------------------------------------------------------------ public

    def forward(self, indices: object, obs: object) -> tf.Tensor:
        """Raw outputs of the listed slots' networks.

        Args:
            indices: int ``[k]`` distinct slots in ``[0, num_slots)``.
            obs: ``[k, *observation_spec.shape]`` of the spec's dtype, one per index.

        Returns:
            float32 ``[k, num_outputs]`` (logits, or pre-squash continuous outputs).

        Raises:
            TypeError, ValueError: wrong observation dtype or shape, or an index tensor that
                is not int32 (checked before running).
            tf.errors.InvalidArgumentError: bad indices (``neuroevo.core.indices``): not integers,
                out of range or repeated. Nothing is cast.
        """
        return self._forward_fn(*self._check_inputs(indices, obs))

    def act(self, indices: object, obs: object) -> tf.Tensor:
        """Actions of the listed slots: int32 ``[k]`` (argmax) or float32 ``[k, *shape]``.

        Same arguments and errors as ``forward``.
        """
        return self._act_fn(*self._check_inputs(indices, obs))

    def reset_state(self, indices: object) -> tf.Operation | None:
        """Zeroes the listed slots' recurrent state (a new episode); see ``PopulationModel``.

        Args:
            indices: int32 ``[k]`` slots (a tensor inside a graph function).
        """
        if not self.stateful:
            return tf.no_op()
        indices = index_tensor(indices, self.num_slots, "indices")
        with tf.device(self.device):
            return tf.group([op for layer in self.layers for op in layer.reset(indices)])

    def load(self, slots: object, flat_params: object) -> None:
        """Writes flat parameter vectors into slots, one scatter per tensor for all slots.

        Args:
            slots: int ``[k]`` distinct slots.
            flat_params: float32 ``[k, num_params]`` in the layout order (module docstring).

        With virtual batch norm, the loaded slots' reference statistics are recomputed.
        """
        slots = index_tensor(slots, self.num_slots, "slots")
        flat = tf.convert_to_tensor(flat_params)
        if flat.dtype != tf.float32:
            raise TypeError(f"flat_params must be float32, got {flat.dtype.name}")
        if flat.shape.rank != 2 or flat.shape[1] not in (None, self.num_params):
            raise ValueError(f"flat_params must be [k, {self.num_params}], got {flat.shape}")
        if None not in (flat.shape[0], slots.shape[0]) and flat.shape[0] != slots.shape[0]:
            raise ValueError(
                f"flat_params has {flat.shape[0]} rows but slots has {slots.shape[0]} entries"
            )
        if self.virtual_batch_norm and not self._has_reference:
            raise ValueError(
                "virtual batch norm needs a reference batch: call set_reference_batch(obs) "
                "before load"
            )
        self._load_fn(slots, flat)
        if self.virtual_batch_norm:
            self._reference_fn(slots)

    def read(self, slots: object) -> tf.Tensor:
        """float32 ``[k, num_params]``: the listed slots' parameters (rounded if bfloat16)."""
        return self._read_fn(index_tensor(slots, self.num_slots, "slots"))

    def set_reference_batch(self, obs: object) -> None:
        """Fixes the virtual-batch-norm reference batch and recomputes every slot's statistics.

        Args:
            obs: ``[batch, *observation_spec.shape]`` observations, batch >= 2 (the ES paper
                drew them once, at the start of training, from random-action episodes).
        """
        if not self.virtual_batch_norm:
            raise ValueError("this model was built with virtual_batch_norm=False")
        obs = self._check_obs(obs, "reference batch")
        if obs.shape[0] is None or obs.shape[0] < 2:
            raise ValueError(f"the reference batch needs at least 2 observations, got {obs.shape}")
        self._reference.assign(obs)
        self._has_reference = True
        self._reference_fn(tf.range(self.num_slots, dtype=tf.int32))

    @property
    def reference_batch(self) -> tf.Variable | None:
        """The virtual-batch-norm reference observations ``[batch, ...]``, or None."""
        return self._reference

    @property
    def variables(self) -> tuple[tf.Variable, ...]:
        """The parameter variables, ``[num_slots, *spec.shape]`` each, in layout order."""
        return self._variables

    # ---------------------------------------------------------------------------- hooks

    def preprocess(self, obs: tf.Tensor) -> tf.Tensor:
        """Observations as float32 network inputs: uint8 scaled to [0, 1], floats as they are."""
        if obs.dtype == tf.uint8:
            return tf.cast(obs, tf.float32) * UINT8_SCALE
        return tf.cast(obs, tf.float32)

    # -------------------------------------------------------------------------- internals

    @staticmethod
    def _num_outputs(action_spec: ActionSpec) -> int:
        if action_spec.discrete:
            if action_spec.num_actions < 1:
                raise ValueError(
                    f"a discrete action spec needs num_actions >= 1, got {action_spec.num_actions}"
                )
            return action_spec.num_actions
        size = math.prod(action_spec.shape)
        if not action_spec.shape or size < 1:
            raise ValueError(
                f"a continuous action spec needs a non-empty shape, got {action_spec.shape}"
            )
        return size

    @staticmethod
    def _action_bounds(action_spec: ActionSpec, output: str) -> tuple[np.ndarray, np.ndarray]:
        shape = tuple(action_spec.shape)
        low = np.broadcast_to(
            np.asarray(-1.0 if action_spec.low is None else action_spec.low, np.float32), shape
        )
        high = np.broadcast_to(
            np.asarray(1.0 if action_spec.high is None else action_spec.high, np.float32), shape
        )
        if not action_spec.discrete:
            if np.any(low > high):
                raise ValueError(f"action bounds have low > high: low={low}, high={high}")
            if output == "tanh" and not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
                raise ValueError("output='tanh' needs finite action bounds; use output='clip'")
        return low, high

    def _name_layers(self) -> None:
        seen: set[str] = set()
        for position, layer in enumerate(self.layers, start=1):
            if layer.name is None:
                layer.name = f"{type(layer).__name__.lower()}{position}"
            if layer.name in seen:
                raise ValueError(f"two layers are named {layer.name!r}; layer names must be unique")
            seen.add(layer.name)

    def _check_obs(self, obs: object, what: str) -> tf.Tensor:
        spec = self.observation_spec
        obs = tf.convert_to_tensor(obs)
        if obs.dtype != spec.dtype:
            raise TypeError(
                f"{what} must be {spec.dtype.name} like the observation spec, got {obs.dtype.name}"
            )
        if obs.shape.rank != 1 + len(spec.shape) or not obs.shape[1:].is_compatible_with(
            spec.shape
        ):
            raise ValueError(
                f"{what} must be [k, {', '.join(map(str, spec.shape))}], got shape {obs.shape}"
            )
        return obs

    def _check_inputs(self, indices: object, obs: object) -> tuple[tf.Tensor, tf.Tensor]:
        indices = index_tensor(indices, self.num_slots)
        obs = self._check_obs(obs, "obs")
        if None not in (obs.shape[0], indices.shape[0]) and obs.shape[0] != indices.shape[0]:
            raise ValueError(
                f"obs has {obs.shape[0]} rows but indices has {indices.shape[0]} entries; "
                "pass one observation per index"
            )
        return indices, obs

    def _forward(self, indices: tf.Tensor, obs: tf.Tensor) -> tf.Tensor:
        with tf.device(self.device):
            if self.implementation == "gather":
                indices = checked_indices(indices, self.num_slots)
            x = (obs if self._raw_obs else self.preprocess(obs))[:, tf.newaxis]
            for layer in self.layers:
                x = layer(indices, x)
            return x[:, 0]

    def _head(self, outputs: tf.Tensor) -> tf.Tensor:
        with tf.device(self.device):
            if self.action_spec.discrete:
                return tf.argmax(outputs, axis=-1, output_type=tf.int32)
            z = tf.reshape(outputs, [-1, *self.action_spec.shape])
            if self.output == "tanh":
                return self._low + (tf.math.tanh(z) + 1.0) * (0.5 * (self._high - self._low))
            return tf.clip_by_value(z, self._low, self._high)

    def _load(self, slots: tf.Tensor, flat: tf.Tensor) -> None:
        with tf.device(self.device):
            slots = checked_indices(slots, self.num_slots)
            tf.debugging.assert_equal(
                tf.shape(flat)[0],
                tf.shape(slots)[0],
                message="flat_params must have one row per slot",
            )
            parts = tf.split(flat, [spec.size for spec in self.layout], axis=1)
            for variable, spec, part in zip(self._variables, self.layout, parts, strict=True):
                values = tf.cast(tf.reshape(part, [-1, *spec.shape]), variable.dtype)
                variable.scatter_update(tf.IndexedSlices(values, slots))

    def _read(self, slots: tf.Tensor) -> tf.Tensor:
        with tf.device(self.device):
            slots = checked_indices(slots, self.num_slots)
            parts = [
                tf.reshape(tf.cast(tf.gather(v, slots), tf.float32), [tf.size(slots), -1])
                for v in self._variables
            ]
            return tf.concat(parts, axis=1)

    def _record_reference_stats(self, slots: tf.Tensor) -> None:
        with tf.device(self.device):
            x = self.preprocess(self._reference.read_value())[tf.newaxis]
            # Chunks of slots whose activations for the whole batch fit the memory budget.
            per_slot = 4 * self._reference_floats * tf.shape(x)[1]
            chunk = tf.maximum(1, REFERENCE_CHUNK_BYTES // per_slot)
            for start in tf.range(0, tf.size(slots), chunk):
                part = slots[start : start + chunk]
                h = tf.tile(
                    x, tf.concat([tf.shape(part), tf.ones([x.shape.rank - 1], tf.int32)], 0)
                )
                for layer in self.layers:
                    h = layer(part, h, reference=True)
