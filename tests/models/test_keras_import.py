"""Keras import: every supported layer against the Keras model itself, run per slot.

Each slot gets its own random weights (``set_weights`` on the Keras model, then
``keras_params``) and fresh random inputs; the population model's forward pass for all slots
at once must equal the Keras model's output for each slot's weights within 1e-5. Recurrent
models are stepped one observation at a time and compared with the Keras model run on the
whole prefix of the sequence.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from neuroevo.envs.base import ActionSpec, ObservationSpec
from neuroevo.models import from_keras
from neuroevo.models.keras import initial_std

keras = tf.keras
L = keras.layers
SLOTS = 3
STEPS = 4
TOLERANCE = 1e-5


def _sequential(input_shape, *layers):
    return keras.Sequential([keras.Input(input_shape), *layers])


FEEDFORWARD = {
    "dense": lambda: _sequential((5,), L.Dense(7, "relu"), L.Dense(3)),
    "dense_no_bias_activations": lambda: _sequential(
        (5,),
        L.Dense(6, "elu", use_bias=False),
        L.Activation("sigmoid"),
        L.Dense(4, "selu"),
        L.Dense(5, "gelu"),
        L.Dense(4, "swish"),
        L.Dense(4, "softplus"),
        L.Dropout(0.5),
        L.Dense(3, "softmax"),
    ),
    "conv2d_flatten": lambda: _sequential(
        (9, 9, 2),
        L.Conv2D(4, 3, strides=2, padding="same", activation="relu"),
        L.Conv2D(3, 2, padding="valid", activation="tanh", use_bias=False),
        L.Flatten(),
        L.Dense(2),
    ),
    "pooling": lambda: _sequential(
        (8, 8, 3),
        L.Conv2D(4, 1, activation="relu"),
        L.MaxPooling2D(2),
        L.AveragePooling2D(2, strides=1, padding="same"),
        L.MaxPooling2D(3, strides=1, padding="same"),
        L.GlobalAveragePooling2D(),
        L.Dense(2),
    ),
    "global_max_pool": lambda: _sequential(
        (6, 6, 2), L.AveragePooling2D(3, strides=2), L.GlobalMaxPooling2D(), L.Dense(2)
    ),
    "reshape": lambda: _sequential(
        (12,), L.Reshape((2, 2, 3)), L.Conv2D(2, 1), L.Reshape((-1,)), L.Dense(2)
    ),
    "layer_norm": lambda: _sequential(
        (6,),
        L.Dense(5),
        L.LayerNormalization(),
        L.ReLU(),
        L.LayerNormalization(center=False, epsilon=1e-2),
        L.Dense(3),
        L.Softmax(),
    ),
    "functional_chain": lambda: _functional(),
}

RECURRENT = {
    "lstm": lambda: _sequential((None, 3), L.LSTM(4), L.Dense(2)),
    "lstm_sequences": lambda: _sequential((None, 3), L.LSTM(4, return_sequences=True), L.Dense(2)),
    "lstm_no_forget_bias": lambda: _sequential(
        (None, 3), L.LSTM(3, unit_forget_bias=False, use_bias=True), L.Dense(2)
    ),
    "gru": lambda: _sequential((None, 3), L.GRU(4), L.Dense(2)),
    "gru_reset_before": lambda: _sequential((None, 3), L.GRU(4, reset_after=False), L.Dense(2)),
    "gru_no_bias": lambda: _sequential((None, 3), L.GRU(3, use_bias=False), L.Dense(2)),
    "dense_lstm_gru_stack": lambda: _sequential(
        (None, 3),
        L.Dense(5, "tanh"),
        L.LayerNormalization(),
        L.LSTM(4, return_sequences=True),
        L.GRU(3),
        L.Dense(2),
    ),
}


def _functional():
    inputs = keras.Input((4,))
    x = L.Dense(6, "tanh")(inputs)
    x = L.Dense(5, "relu")(x)
    return keras.Model(inputs, L.Dense(3)(x))


def _randomise(net, rng):
    net.set_weights(
        [rng.normal(0.0, 0.6, np.shape(w)).astype(np.float32) for w in net.get_weights()]
    )


def _slot_weights(net, model, rng):
    """Random weights per slot: ``([SLOTS, num_params], [one Keras weight list per slot])``."""
    flats, keras_weights = [], []
    for _ in range(SLOTS):
        _randomise(net, rng)
        flats.append(model.keras_params(net))
        keras_weights.append(net.get_weights())
    return np.stack(flats), keras_weights


# The custom ops (CPU) for every model; the gather path (GPU) for one model per layer kind.
GATHER = ("conv2d_flatten", "pooling", "layer_norm", "dense_lstm_gru_stack", "gru_reset_before")


def _cases(names):
    return [(name, "op") for name in sorted(names)] + [
        (name, "gather") for name in GATHER if name in names
    ]


@pytest.mark.parametrize(("name", "implementation"), _cases(FEEDFORWARD))
def test_feedforward_layers_equal_keras_per_slot(name, implementation) -> None:
    seed = sorted(FEEDFORWARD).index(name)
    rng = np.random.default_rng(seed)
    net = FEEDFORWARD[name]()
    model = from_keras(net, SLOTS, implementation=implementation)
    assert not model.recurrent
    flats, keras_weights = _slot_weights(net, model, rng)
    model.load(np.arange(SLOTS, dtype=np.int32), flats.astype(np.float32))
    for _ in range(2):  # fresh inputs, slots in a shuffled order
        order = rng.permutation(SLOTS).astype(np.int32)
        obs = rng.normal(size=(SLOTS, *model.observation_spec.shape)).astype(np.float32)
        ours = model.forward(order, obs).numpy()
        for row, slot in enumerate(order):
            net.set_weights(keras_weights[slot])
            expected = net(obs[row : row + 1]).numpy()[0]
            np.testing.assert_allclose(ours[row], expected, atol=TOLERANCE, err_msg=f"seed {seed}")


@pytest.mark.parametrize(("name", "implementation"), _cases(RECURRENT))
def test_recurrent_layers_equal_keras_on_each_prefix(name, implementation) -> None:
    seed = 100 + sorted(RECURRENT).index(name)
    rng = np.random.default_rng(seed)
    net = RECURRENT[name]()
    model = from_keras(net, SLOTS, implementation=implementation)
    assert model.recurrent and model.observation_spec.shape == (3,)
    sequences = net.layers[-2].return_sequences if name == "lstm_sequences" else False
    flats, keras_weights = _slot_weights(net, model, rng)
    slots = np.arange(SLOTS, dtype=np.int32)
    model.load(slots, flats.astype(np.float32))
    for _episode in range(2):  # the second episode must not remember the first
        model.reset_state(slots)
        obs = rng.normal(size=(SLOTS, STEPS, 3)).astype(np.float32)
        ours = np.stack([model.forward(slots, obs[:, t]).numpy() for t in range(STEPS)], 1)
        for slot in range(SLOTS):
            net.set_weights(keras_weights[slot])
            if sequences:
                expected = net(obs[slot : slot + 1]).numpy()[0]
            else:
                expected = np.stack(
                    [net(obs[slot : slot + 1, : t + 1]).numpy()[0] for t in range(STEPS)]
                )
            np.testing.assert_allclose(ours[slot], expected, atol=TOLERANCE, err_msg=f"seed {seed}")


def test_reset_state_clears_only_the_listed_slots() -> None:
    rng = np.random.default_rng(7)
    net = RECURRENT["lstm"]()
    model = from_keras(net, 2)
    _randomise(net, rng)
    model.load([0, 1], np.stack([model.keras_params(net)] * 2))
    obs = rng.normal(size=(2, 3)).astype(np.float32)
    first = model.forward([0, 1], obs).numpy()
    model.forward([0, 1], obs)
    model.reset_state([0])
    again = model.forward([0, 1], obs).numpy()
    np.testing.assert_allclose(again[0], first[0], atol=TOLERANCE)
    assert not np.allclose(again[1], first[1], atol=1e-3)


def test_init_scales_follow_the_keras_initialisers() -> None:
    net = _sequential(
        (None, 3),
        L.Dense(5, kernel_initializer="he_normal", bias_initializer="zeros", name="dense"),
        L.LSTM(4, name="lstm"),
        L.Dense(2, kernel_initializer=keras.initializers.RandomUniform(-0.3, 0.3), name="dense_1"),
    )
    model = from_keras(net, 1)
    scales = model.init_scales()
    expected = {
        "dense/kernel": math.sqrt(2 / 3),  # He: 2 / fan_in
        "dense/bias": 0.0,
        "lstm/kernel": math.sqrt(2 / (5 + 16)),  # Glorot: 2 / (fan_in + fan_out)
        "lstm/recurrent_kernel": 1 / math.sqrt(16),  # orthogonal [4, 16]
        "lstm/bias": 0.0,
        "dense_1/kernel": 0.6 / math.sqrt(12),
        "dense_1/bias": 0.0,
    }
    start = 0
    for spec in model.layout:
        np.testing.assert_allclose(
            scales[start : start + spec.size], expected[spec.name], rtol=1e-6
        )
        start += spec.size
    # The drawn weights have the std each scale promises.
    draws = keras.initializers.Orthogonal()((4, 16)).numpy()
    assert abs(draws.std() - initial_std(keras.initializers.Orthogonal(), draws)) < 0.05
    # A fresh LSTM's forget bias (1) is the stored zero plus the layer's offset.
    flat = model.keras_params(net)
    bias_spec = next(s for s in model.layout if s.name.endswith("lstm/bias"))
    offset = sum(s.size for s in model.layout[: model.layout.index(bias_spec)])
    np.testing.assert_array_equal(flat[offset : offset + bias_spec.size], 0.0)


def test_evolved_weights_go_back_into_keras() -> None:
    rng = np.random.default_rng(11)
    net = RECURRENT["dense_lstm_gru_stack"]()
    model = from_keras(net, 1)
    flat = rng.normal(size=model.num_params).astype(np.float32)
    model.set_keras_params(net, flat)
    np.testing.assert_allclose(model.keras_params(net), flat, atol=1e-6)
    with pytest.raises(ValueError, match=r"flat_params must be \[\d+\]"):
        model.set_keras_params(net, flat[:-1])


def test_imported_model_takes_env_specs() -> None:
    net = _sequential((4,), L.Dense(3, "tanh"), L.Dense(2))
    continuous = ActionSpec(discrete=False, shape=(2,), low=-np.ones(2), high=np.ones(2))
    model = from_keras(
        net, 2, action_spec=continuous, observation_spec=ObservationSpec((4,), tf.float32)
    )
    model.load([0, 1], np.ones((2, model.num_params), np.float32))
    assert model.act([0, 1], np.zeros((2, 4), np.float32)).shape == (2, 2)
    with pytest.raises(ValueError, match=r"observes float32 \[5\].*takes float32 \[4\]"):
        from_keras(net, 2, observation_spec=ObservationSpec((5,), tf.float32))
    with pytest.raises(ValueError, match="needs 3"):
        from_keras(net, 2, action_spec=ActionSpec(discrete=True, num_actions=3))


def _branching():
    inputs = keras.Input((4,))
    a = L.Dense(3)(inputs)
    b = L.Dense(3)(inputs)
    return keras.Model(inputs, L.Add()([a, b]))


@pytest.mark.parametrize(
    ("build", "pattern"),
    [
        (
            lambda: _sequential((5, 3), L.Conv1D(2, 2), L.Flatten(), L.Dense(2)),
            r"'conv1d\w*' \(Conv1D\): no population counterpart",
        ),
        (
            lambda: _sequential((4,), L.BatchNormalization(), L.Dense(2)),
            r"\(BatchNormalization\): no population counterpart",
        ),
        (
            lambda: _sequential((6, 6, 1), L.Conv2D(2, (3, 1)), L.Flatten(), L.Dense(2)),
            r"kernel_size=\(3, 1\): only square",
        ),
        (
            lambda: _sequential((4,), L.Dense(3, "hard_sigmoid"), L.Dense(2)),
            r"activation 'hard_sigmoid' is not supported",
        ),
        (
            lambda: _sequential((None, 3), L.LSTM(2, go_backwards=True), L.Dense(2)),
            r"go_backwards=True is not supported",
        ),
        (
            lambda: _sequential((5, 3), L.LSTM(2, return_sequences=True), L.Flatten(), L.Dense(2)),
            r"\(Flatten\): acts across the time axis",
        ),
        (_branching, r"\(Dense\): does not take the previous layer's output"),
        (lambda: keras.Sequential([L.Dense(2)]), r"no input shape yet"),
    ],
)
def test_unsupported_models_name_the_layer(build, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        from_keras(build(), 2)


class ScaledDense(L.Dense):
    """A Dense that computes something else: converting it as a Dense would be wrong."""

    def call(self, inputs):
        return super().call(inputs) * 2.0


class ShiftedReLU(L.ReLU):
    def call(self, inputs):
        return super().call(inputs) - 1.0


class NamedDense(L.Dense):
    """A Dense whose own code only changes its constructor: converted as a Dense."""

    def __init__(self, units: int, **kwargs):
        super().__init__(units, activation="tanh", **kwargs)


@pytest.mark.parametrize(
    ("layer", "pattern"),
    [
        (ScaledDense(2), r"'scaled_dense\w*' \(ScaledDense\): a subclass of Dense with its own"),
        (ShiftedReLU(), r"\(ShiftedReLU\): a subclass of ReLU with its own call\(\)"),
    ],
    ids=["Dense", "ReLU"],
)
def test_a_subclass_of_a_supported_layer_with_its_own_call_is_refused(layer, pattern) -> None:
    with pytest.raises(ValueError, match=pattern):
        from_keras(_sequential((4,), L.Dense(3), layer), 2)


def test_a_subclass_that_only_changes_its_constructor_is_converted() -> None:
    net = _sequential((4,), NamedDense(3), L.Dense(2))
    model = from_keras(net, 1)
    model.load([0], model.keras_params(net)[None])
    obs = np.linspace(-1, 1, 4, dtype=np.float32)[None]
    np.testing.assert_allclose(model.forward([0], obs), net(obs), atol=1e-5)


@pytest.mark.parametrize("model", ["x", 2, None, L.Dense(2)], ids=repr)
def test_something_other_than_a_keras_model_is_a_value_error(model) -> None:
    with pytest.raises(ValueError, match=r"from_keras needs a built tf\.keras Model"):
        from_keras(model, 2)
