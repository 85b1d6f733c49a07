"""Population layers: parameters stored as ``[num_slots, ...]``, each call runs the listed slots.

Activations carry two leading axes, ``[k, m, ...]``: ``k`` listed slots (``indices``, int32
``[k]``, distinct) and ``m`` inputs per slot (1 for a policy step, the reference batch for
virtual batch norm). Each slot's inputs meet only that slot's weights.

Two implementations compute the same thing:

* ``"op"`` (CPU): the ``core`` custom ops read each listed slot's kernel where it lies in the
  variable (``NeuroevoResourceIndexedMatmul`` / ``...Conv2D``), so running 25% of the slots
  reads 25% of the weights and copies none.
* ``"gather"`` (GPU and other devices, where the custom ops have no kernel): gather the listed
  slots' kernels and run batched matmuls, convolutions as im2col patches times the kernel.
  Correct by construction; the gather copies only the listed slots' weights, on the device.

Kernels are stored in the compute dtype (float32 or bfloat16) and widened to float32 as they
are read; activations, biases and virtual-batch-norm statistics stay float32.

Parameter tensors of one network, in layout order (see ``neuroevo.models.sequential``):
``Conv2D``: ``kernel`` ``[kh, kw, c_in, filters]``, ``bias`` ``[filters]``;
``Dense``: ``kernel`` ``[units, in]`` (output-major: each output's weights are contiguous, which
makes the memory-bound policy step a sequence of dot products), ``bias`` ``[units]``.
``Flatten`` orders features as ``(height, width, channel)``.
"""

from __future__ import annotations

import abc
import functools
import math
from collections.abc import Callable

import tensorflow as tf

from neuroevo.models.base import ParamSpec
from neuroevo.models.params import ACTIVATIONS
from neuroevo.models.virtual_batch_norm import VirtualBatchNorm, per_slot

IMPLEMENTATIONS = ("op", "gather")
# Activations the custom ops apply themselves, together with the bias (their tanh has the bits
# of TensorFlow's x86 kernel, tested in tests/ops/test_indexed_matmul.py).
FUSED_ACTIVATIONS = ("relu", "linear", "tanh")
# uint8 inputs of a Conv2D are pixel intensities: the layer sees them scaled to [0, 1].
UINT8_SCALE = 1.0 / 255.0


def core_ops():
    """The compiled ``core`` op library (built on first use)."""
    from neuroevo import ops

    return ops.load("core")


def checked_indices(indices: tf.Tensor, num_slots: int) -> tf.Tensor:
    """``indices`` after asserting each is in ``[0, num_slots)`` and none repeats.

    The custom ops check this themselves; the gather path and ``load`` use this.
    """
    in_range = tf.reduce_all((indices >= 0) & (indices < num_slots))
    distinct = tf.size(tf.unique(indices).y) == tf.size(indices)
    checks = [
        tf.debugging.Assert(
            in_range, [f"slot indices must lie in [0, {num_slots}), got", indices], summarize=64
        ),
        tf.debugging.Assert(
            distinct, ["slot indices must be distinct, got", indices], summarize=64
        ),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(indices)


def _activation(name: str | None) -> Callable[[tf.Tensor], tf.Tensor] | None:
    key = "linear" if name is None else name
    if key not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; expected one of {sorted(ACTIVATIONS)}")
    path = ACTIVATIONS[key]
    return None if path is None else functools.reduce(getattr, path.split("."), tf)


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return value


def _one_of(value: str, first: str, second: str, what: str) -> str:
    if value not in (first, second):
        raise ValueError(f"{what} must be {first!r} or {second!r}, got {value!r}")
    return value


def _check_vector(layer: str, input_shape: tuple[int, ...]) -> None:
    if len(input_shape) != 1:
        raise ValueError(
            f"{layer} expects vector inputs, got shape {list(input_shape)}; "
            "put a Flatten() before it"
        )


def _check_image(layer: str, input_shape: tuple[int, ...]) -> None:
    if len(input_shape) != 3:
        raise ValueError(
            f"{layer} expects [height, width, channels] inputs, got {list(input_shape)}"
        )


def _window_output(
    layer: str,
    what: str,
    input_shape: tuple[int, ...],
    window: tuple[int, ...],
    strides: tuple[int, ...],
    padding: str,
) -> tuple[int, int]:
    """(height, width) of a ``window`` sliding by ``strides`` over ``[h, w, c]`` inputs, as
    ``tf.nn`` pads; ``layer`` and ``what`` (kernel, window) name them in the errors."""
    _check_image(layer, input_shape)
    height, width = (
        -(-size // step) if padding == "SAME" else (size - side) // step + 1
        for size, side, step in zip(input_shape[:2], window, strides, strict=True)
    )
    if min(height, width) < 1:
        raise ValueError(
            f"{layer}: a {window[0]}x{window[1]} VALID {what} does not fit the "
            f"{input_shape[0]}x{input_shape[1]} input"
        )
    return height, width


def indexed_matmul(
    kernel: tf.Variable, indices: tf.Tensor, x: tf.Tensor, implementation: str
) -> tf.Tensor:
    """``x`` ``[k, m, in]`` times each listed slot's ``kernel`` ``[num_slots, out, in]``
    (transposed): float32 ``[k, m, out]``, read in place by the custom op or gathered."""
    if implementation == "op":
        return core_ops().neuroevo_resource_indexed_matmul(
            x, kernel.handle, indices, [], dtype=kernel.dtype
        )
    weights = tf.cast(tf.gather(kernel, indices), tf.float32)
    return tf.linalg.matmul(x, weights, transpose_b=True)


class PopulationLayer(abc.ABC):
    """One layer of ``num_slots`` networks; ``build`` creates its variables.

    Subclasses give their output shape, parameter shapes and the linear map; the base adds
    the bias (after virtual batch norm when enabled) and the activation. Layers whose custom
    op can add the bias and apply the activation itself (``fuses_epilogue``) provide
    ``fused_linear``; the base uses it when nothing comes between the map and the bias.
    """

    fuses_epilogue = False
    stateful = False
    """Whether the layer keeps per-slot state across calls (cleared by ``reset``)."""

    def __init__(self, name: str | None, activation: str | None):
        self.name = name
        self.activation = activation
        self._activation_fn = _activation(activation)
        self.variables: tuple[tf.Variable, ...] = ()
        self.layout: tuple[ParamSpec, ...] = ()
        self.kernel: tf.Variable | None = None
        self.bias: tf.Variable | None = None
        self.normalizer: VirtualBatchNorm | None = None
        self.implementation = "op"

    @abc.abstractmethod
    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        """Per-network output shape for a per-network ``input_shape``; ValueError if invalid."""

    def param_specs(self, input_shape: tuple[int, ...]) -> tuple[ParamSpec, ...]:
        """Per-network parameter tensors (names local to the layer); none by default."""
        del input_shape
        return ()

    def scratch_elements(self, input_shape: tuple[int, ...]) -> int:
        """Floats per input that a call may hold at once (input, output, patches)."""
        return max(math.prod(input_shape), math.prod(self.output_shape(input_shape)))

    def linear(self, indices: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        """The layer's map before bias and activation; identity by default."""
        del indices
        return x

    def reset(self, indices: tf.Tensor) -> list[tf.Operation]:
        """Clears the listed slots' recurrent state (a new episode); stateless layers: none."""
        del indices
        return []

    def build(
        self,
        input_shape: tuple[int, ...],
        num_slots: int,
        dtype: tf.DType,
        virtual_batch_norm: bool,
        implementation: str,
    ) -> tuple[int, ...]:
        """Creates the ``[num_slots, ...]`` variables (on the current device).

        Kernels take ``dtype``; biases stay float32. Returns the per-network output shape.
        """
        if self.name is None:
            raise ValueError(f"{type(self).__name__} needs a name before it is built")
        if self.variables:
            raise ValueError(f"layer {self.name!r} is already built; create a new layer")
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(
                f"unknown implementation {implementation!r}; expected one of {IMPLEMENTATIONS}"
            )
        if virtual_batch_norm and self.stateful:
            raise ValueError(
                f"{type(self).__name__} {self.name!r}: virtual batch norm needs a batch of "
                "independent inputs per slot, a stateful layer has one state per slot; turn "
                "virtual_batch_norm off"
            )
        out_shape = self.output_shape(tuple(input_shape))
        specs = self.param_specs(tuple(input_shape))
        self.implementation = implementation
        self.layout = tuple(
            ParamSpec(f"{self.name}/{spec.name}", spec.shape, spec.init_std) for spec in specs
        )
        self.variables = tuple(
            tf.Variable(
                tf.zeros([num_slots, *spec.shape], dtype if spec.name == "kernel" else tf.float32),
                trainable=False,
                name=full.name,
            )
            for spec, full in zip(specs, self.layout, strict=True)
        )
        by_name = {spec.name: var for spec, var in zip(specs, self.variables, strict=True)}
        self.kernel, self.bias = by_name.get("kernel"), by_name.get("bias")
        if virtual_batch_norm and self._activation_fn is not None and specs:
            self.normalizer = VirtualBatchNorm(num_slots, out_shape[-1], self.name)
        self._finish_build(by_name, num_slots)
        return out_shape

    def _finish_build(self, variables: dict[str, tf.Variable], num_slots: int) -> None:
        """The end of ``build``, given the parameter variables by local name: a stateful layer
        creates its ``[num_slots, ...]`` state here."""
        del variables, num_slots

    def __call__(self, indices: tf.Tensor, x: tf.Tensor, reference: bool = False) -> tf.Tensor:
        """``[k, m, *input_shape]`` -> ``[k, m, *output_shape]`` for the listed slots.

        Args:
            indices: int32 ``[k]`` distinct slots.
            x: float32 ``[k, m, *input_shape]``.
            reference: ``x`` is the reference batch; record virtual-batch-norm statistics.
        """
        if (
            self.fuses_epilogue
            and self.implementation == "op"
            and self.normalizer is None
            and self.bias is not None
            and (self.activation or "linear") in FUSED_ACTIVATIONS
        ):
            return self.fused_linear(indices, x)
        z = self.linear(indices, x)
        if self.normalizer is not None:
            z = self.normalizer(indices, z, reference)
        if self.bias is not None:
            z = z + per_slot(tf.gather(self.bias, indices), z.shape.rank)
        return z if self._activation_fn is None else self._activation_fn(z)


class KernelLayer(PopulationLayer):
    """A layer with one kernel (initial std ``init_std / sqrt(fan_in)``) and, with ``use_bias``,
    a bias of its output features after it; its custom op fuses bias and activation."""

    fuses_epilogue = True

    def __init__(self, name: str | None, activation: str | None, init_std: float, use_bias: bool):
        super().__init__(name, activation)
        self.use_bias = bool(use_bias)
        self.init_std = float(init_std)

    def _kernel_specs(
        self, shape: tuple[int, ...], fan_in: int, features: int
    ) -> tuple[ParamSpec, ...]:
        """The kernel of ``shape`` and the optional bias ``[features]``."""
        specs = (ParamSpec("kernel", shape, self.init_std / math.sqrt(fan_in)),)
        return (*specs, ParamSpec("bias", (features,), 0.0)) if self.use_bias else specs


class Conv2D(KernelLayer):
    """2-D convolution, NHWC, kernel ``[kh, kw, c_in, filters]`` per slot.

    Inputs are float32, or uint8 pixel intensities that the layer scales by ``UINT8_SCALE``
    (the custom op widens them as it builds patches, so no float copy of the observations is
    written).

    Args:
        filters: output channels.
        kernel_size: square kernel side.
        stride: square stride.
        padding: ``"SAME"`` or ``"VALID"``, as in ``tf.nn.conv2d``.
        activation: a name in ``ACTIVATIONS`` or None.
        init_std: initial std of the kernel times ``1/sqrt(fan_in)``.
        name: unique within the model (the model names unnamed layers).
        use_bias: whether the layer has a bias (``[filters]``, after the kernel).
    """

    def __init__(
        self,
        filters: int,
        kernel_size: int,
        stride: int = 1,
        padding: str = "SAME",
        activation: str | None = "relu",
        init_std: float = 1.0,
        name: str | None = None,
        use_bias: bool = True,
    ):
        super().__init__(name, activation, init_std, use_bias)
        self.filters = _positive_int(filters, "Conv2D filters")
        self.kernel_size = _positive_int(kernel_size, "Conv2D kernel_size")
        self.stride = _positive_int(stride, "Conv2D stride")
        self.padding = _one_of(padding, "SAME", "VALID", "Conv2D padding")

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        side, step = (self.kernel_size,) * 2, (self.stride,) * 2
        height, width = _window_output(
            f"Conv2D {self.name!r}", "kernel", input_shape, side, step, self.padding
        )
        return (height, width, self.filters)

    def scratch_elements(self, input_shape: tuple[int, ...]) -> int:
        out_h, out_w, _ = self.output_shape(input_shape)
        patches = out_h * out_w * self.kernel_size**2 * input_shape[2]
        return max(super().scratch_elements(input_shape), patches)

    def param_specs(self, input_shape: tuple[int, ...]) -> tuple[ParamSpec, ...]:
        fan_in = self.kernel_size * self.kernel_size * input_shape[2]
        kernel = (self.kernel_size, self.kernel_size, input_shape[2], self.filters)
        return self._kernel_specs(kernel, fan_in, self.filters)

    def _op(self, indices: tf.Tensor, x: tf.Tensor, fused: bool) -> tf.Tensor:
        return core_ops().neuroevo_resource_indexed_conv2d(
            x,
            self.kernel.handle,
            indices,
            [self.bias.handle] if fused else [],
            dtype=self.kernel.dtype,
            stride=self.stride,
            padding=self.padding,
            input_scale=UINT8_SCALE if x.dtype == tf.uint8 else 1.0,
            activation=(self.activation or "linear") if fused else "linear",
        )

    def fused_linear(self, indices: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        """Convolution, bias and activation in one custom-op call."""
        return self._op(indices, x, fused=True)

    def linear(self, indices: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        kernel = self.kernel
        if self.implementation == "op":
            return self._op(indices, x, fused=False)
        if x.dtype == tf.uint8:
            x = tf.cast(x, tf.float32) * UINT8_SCALE
        k, m = tf.shape(x)[0], tf.shape(x)[1]
        height, width, channels = x.shape[2:]
        size = self.kernel_size
        patches = tf.image.extract_patches(
            tf.reshape(x, [-1, height, width, channels]),
            sizes=[1, size, size, 1],
            strides=[1, self.stride, self.stride, 1],
            rates=[1, 1, 1, 1],
            padding=self.padding,
        )
        out_h, out_w = patches.shape[1], patches.shape[2]
        patches = tf.reshape(patches, [k, -1, size * size * channels])
        weights = tf.cast(tf.gather(kernel, indices), tf.float32)
        weights = tf.reshape(weights, [k, size * size * channels, self.filters])
        return tf.reshape(tf.linalg.matmul(patches, weights), [k, m, out_h, out_w, self.filters])


class Dense(KernelLayer):
    """Fully connected layer, kernel ``[units, in]`` per slot.

    Args:
        units: output features.
        activation: a name in ``ACTIVATIONS`` or None.
        init_std: initial std of the kernel times ``1/sqrt(fan_in)`` (the paper's output layer
            uses 0.1).
        name: unique within the model (the model names unnamed layers).
        use_bias: whether the layer has a bias (``[units]``, after the kernel).
    """

    def __init__(
        self,
        units: int,
        activation: str | None = "relu",
        init_std: float = 1.0,
        name: str | None = None,
        use_bias: bool = True,
    ):
        super().__init__(name, activation, init_std, use_bias)
        self.units = _positive_int(units, "Dense units")

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        _check_vector(f"Dense {self.name!r}", input_shape)
        return (self.units,)

    def param_specs(self, input_shape: tuple[int, ...]) -> tuple[ParamSpec, ...]:
        return self._kernel_specs((self.units, input_shape[0]), input_shape[0], self.units)

    def fused_linear(self, indices: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        """Matmul, bias and activation in one custom-op call."""
        return core_ops().neuroevo_resource_indexed_matmul(
            x,
            self.kernel.handle,
            indices,
            [self.bias.handle],
            dtype=self.kernel.dtype,
            activation=self.activation or "linear",
        )

    def linear(self, indices: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        return indexed_matmul(self.kernel, indices, x, self.implementation)


class Flatten(PopulationLayer):
    """``[k, m, h, w, c]`` -> ``[k, m, h * w * c]`` in (height, width, channel) order."""

    def __init__(self, name: str | None = None):
        super().__init__(name, None)

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        return (math.prod(input_shape),)

    def linear(self, indices: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        del indices
        features = math.prod(x.shape[2:])
        if x.shape[1] is not None:  # a static shape keeps the policy step's graph small
            return tf.reshape(x, [-1, x.shape[1], features])
        return tf.reshape(x, tf.concat([tf.shape(x)[:2], [features]], 0))


class Activation(PopulationLayer):
    """An activation on its own (no parameters): ``activation`` is a name in ``ACTIVATIONS``."""

    def __init__(self, activation: str, name: str | None = None):
        super().__init__(name, activation)

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        return input_shape


class Reshape(PopulationLayer):
    """Reshapes each input to ``target_shape`` (C order; one entry may be -1)."""

    def __init__(self, target_shape: tuple[int, ...], name: str | None = None):
        super().__init__(name, None)
        self.target_shape = tuple(int(d) for d in target_shape)
        if sum(d == -1 for d in self.target_shape) > 1 or any(
            d < 1 and d != -1 for d in self.target_shape
        ):
            raise ValueError(
                f"Reshape target_shape must be positive sizes and at most one -1, got "
                f"{list(target_shape)}"
            )

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        size = math.prod(input_shape)
        known = math.prod(d for d in self.target_shape if d != -1)
        shape = tuple(size // known if d == -1 else d for d in self.target_shape)
        if math.prod(shape) != size:
            raise ValueError(
                f"Reshape {self.name!r} cannot make {list(input_shape)} ({size} values) into "
                f"{list(self.target_shape)}"
            )
        return shape

    def linear(self, indices: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        del indices
        shape = self.output_shape(tuple(x.shape[2:]))
        return tf.reshape(x, tf.concat([tf.shape(x)[:2], shape], 0))


class LayerNormalization(PopulationLayer):
    """Normalises each input over its last axis, then scales and shifts per feature.

    ``y = (x - mean) / sqrt(var + epsilon) * (1 + scale) + center`` with per-slot ``scale``
    and ``center`` ``[features]``. The scale is stored as its deviation from 1 so that the
    usual initialisation (scale 1) is the zero vector every genome starts from; both start at
    std 0 unless ``init_std`` says otherwise.

    Args:
        epsilon: added to the variance.
        scale, center: whether the layer has the parameter (Keras' ``scale`` / ``center``).
        init_std: initial std of the scale and center deviations.
        name: unique within the model.
    """

    def __init__(
        self,
        epsilon: float = 1e-3,
        scale: bool = True,
        center: bool = True,
        init_std: float = 0.0,
        name: str | None = None,
    ):
        super().__init__(name, None)
        self.epsilon = float(epsilon)
        if not self.epsilon > 0:
            raise ValueError(f"LayerNormalization epsilon must be > 0, got {epsilon!r}")
        self.scale, self.center = bool(scale), bool(center)
        self.init_std = float(init_std)

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        return input_shape

    def param_specs(self, input_shape: tuple[int, ...]) -> tuple[ParamSpec, ...]:
        features = (input_shape[-1],)
        specs = [ParamSpec("scale", features, self.init_std)] if self.scale else []
        if self.center:
            specs.append(ParamSpec("center", features, self.init_std))
        return tuple(specs)

    def linear(self, indices: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        y = (x - mean) * tf.math.rsqrt(variance + self.epsilon)
        names = (spec.name.split("/")[-1] for spec in self.layout)
        params = dict(zip(names, self.variables, strict=True))
        if self.scale:
            y = y * (1.0 + per_slot(tf.gather(params["scale"], indices), y.shape.rank))
        if self.center:
            y = y + per_slot(tf.gather(params["center"], indices), y.shape.rank)
        return y


class Pool2D(PopulationLayer):
    """Max or average pooling over ``[height, width]`` windows, NHWC (no parameters).

    Args:
        kind: ``"max"`` or ``"avg"`` (padding cells are not counted in an average).
        pool_size: ``(height, width)`` of the window.
        strides: ``(height, width)`` steps; None: the pool size.
        padding: ``"SAME"`` or ``"VALID"``.
        name: unique within the model.
    """

    def __init__(
        self,
        kind: str,
        pool_size: tuple[int, int] = (2, 2),
        strides: tuple[int, int] | None = None,
        padding: str = "VALID",
        name: str | None = None,
    ):
        super().__init__(name, None)
        self.kind = _one_of(kind, "max", "avg", "Pool2D kind")
        self.padding = _one_of(padding, "SAME", "VALID", "Pool2D padding")
        self.pool_size = tuple(_positive_int(p, "Pool2D pool_size") for p in pool_size)
        steps = self.pool_size if strides is None else strides
        self.strides = tuple(_positive_int(p, "Pool2D strides") for p in steps)

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        name, window, step = f"Pool2D {self.name!r}", self.pool_size, self.strides
        height, width = _window_output(name, "window", input_shape, window, step, self.padding)
        return (height, width, input_shape[2])

    def linear(self, indices: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        del indices
        pool = tf.nn.max_pool2d if self.kind == "max" else tf.nn.avg_pool2d
        out = pool(tf.reshape(x, [-1, *x.shape[2:]]), self.pool_size, self.strides, self.padding)
        return tf.reshape(out, tf.concat([tf.shape(x)[:2], out.shape[1:]], 0))


class GlobalPool2D(PopulationLayer):
    """Max or mean over height and width: ``[h, w, c]`` -> ``[c]`` (no parameters)."""

    def __init__(self, kind: str, name: str | None = None):
        super().__init__(name, None)
        self.kind = _one_of(kind, "max", "avg", "GlobalPool2D kind")

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        _check_image(f"GlobalPool2D {self.name!r}", input_shape)
        return (input_shape[2],)

    def linear(self, indices: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        del indices
        reduce = tf.reduce_max if self.kind == "max" else tf.reduce_mean
        return reduce(x, axis=[2, 3])
