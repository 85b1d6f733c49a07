"""Population models against independent per-network float64 references."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from neuroevo.core.indices import InvalidInputError
from neuroevo.envs.base import ActionSpec, ObservationSpec
from neuroevo.models import (
    MODELS,
    Conv2D,
    Dense,
    Flatten,
    SequentialModel,
    make_model,
)

ATARI_OBS = ObservationSpec((84, 84, 4), tf.uint8)
ATARI_ACTIONS = ActionSpec(discrete=True, num_actions=18)
MUJOCO_OBS = ObservationSpec((11,), tf.float32)
MUJOCO_ACTIONS = ActionSpec(
    discrete=False, shape=(3,), low=np.array([-1.0, -2.0, 0.0]), high=np.array([1.0, 2.0, 0.5])
)

# The architectures, written out independently of the model code: (kind, size, kernel, stride).
NATURE_LARGE = [("conv", 32, 8, 4), ("conv", 64, 4, 2), ("conv", 64, 3, 1), ("dense", 512)]
NATURE_SMALL = [("conv", 16, 8, 4), ("conv", 32, 4, 2), ("dense", 256)]
MLP_32 = [("dense", 32), ("dense", 32)]


def reference_network(arch, flat, num_outputs, obs, activation="relu", vbn_ref=None):
    """One network in float64 with plain TF ops, parameters parsed by the documented layout.

    Args:
        arch: hidden layers as in NATURE_LARGE; an output dense layer follows.
        flat: float64 [num_params] in layout order (conv kernels [kh, kw, cin, cout], dense
            kernels [out, in], each followed by its bias).
        obs: float64 [n, ...] preprocessed observations.
        vbn_ref: float64 [b, ...] preprocessed reference batch, for virtual batch norm.

    Returns:
        float64 [n, num_outputs].
    """
    offset = 0

    def take(shape):
        nonlocal offset
        size = int(np.prod(shape))
        out = flat[offset : offset + size].reshape(shape)
        offset += size
        return out

    act = {"relu": tf.nn.relu, "tanh": tf.math.tanh}[activation]
    x, ref = tf.constant(obs), None if vbn_ref is None else tf.constant(vbn_ref)
    for layer in [*arch, ("dense", num_outputs)]:
        last = layer is not arch[-1] and layer[1] == num_outputs and len(layer) == 2
        if layer[0] == "conv":
            _, filters, size, stride = layer
            kernel = take((size, size, x.shape[-1], filters))
            bias = take((filters,))

            def linear(h, kernel=kernel, stride=stride):
                return tf.nn.conv2d(h, kernel, stride, "SAME")

        else:
            units = layer[1]
            if x.shape.rank > 2:
                x = tf.reshape(x, [x.shape[0], -1])
                ref = None if ref is None else tf.reshape(ref, [ref.shape[0], -1])
            kernel = take((units, x.shape[-1]))
            bias = take((units,))

            def linear(h, kernel=kernel):
                return tf.linalg.matmul(h, kernel, transpose_b=True)

        z = linear(x)
        if last:
            x = z + bias
            break
        if ref is not None:
            z_ref = linear(ref)
            axes = list(range(z_ref.shape.rank - 1))
            mean, var = tf.nn.moments(z_ref, axes)
            inv = 1.0 / tf.sqrt(var + 1e-3)
            z, ref = (z - mean) * inv, act((z_ref - mean) * inv + bias)
        x = act(z + bias)
    assert offset == flat.size
    return x.numpy()


def random_params(model, rng):
    noise = rng.standard_normal((model.num_slots, model.num_params))
    return (noise * model.init_scales()).astype(np.float32)


def rel_error(got, want):
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


def atari_obs(rng, n):
    return rng.integers(0, 256, (n, 84, 84, 4), dtype=np.uint8)


@pytest.fixture(scope="module")
def large():
    """nature_large with 3 slots, loaded with initial-distribution weights."""
    model = make_model("nature_large", 3, ATARI_OBS, ATARI_ACTIONS)
    params = random_params(model, np.random.default_rng(0))
    model.load(np.arange(3), params)
    return model, params


# ------------------------------------------------------------------------------ layout


def test_nature_large_has_the_papers_parameter_count(large):
    model, _ = large
    # conv1 8*8*4*32+32, conv2 4*4*32*64+64, conv3 3*3*64*64+64, fc 7744*512+512, out 512*18+18
    assert model.num_params == 8_224 + 32_832 + 36_928 + 3_965_440 + 9_234 == 4_052_658


def test_layout_order_shapes_and_init_scales(large):
    model, _ = large
    assert [(s.name, s.shape) for s in model.layout] == [
        ("conv1/kernel", (8, 8, 4, 32)),
        ("conv1/bias", (32,)),
        ("conv2/kernel", (4, 4, 32, 64)),
        ("conv2/bias", (64,)),
        ("conv3/kernel", (3, 3, 64, 64)),
        ("conv3/bias", (64,)),
        ("fc/kernel", (512, 7744)),
        ("fc/bias", (512,)),
        ("out/kernel", (18, 512)),
        ("out/bias", (18,)),
    ]
    stds = {s.name: s.init_std for s in model.layout}
    assert stds["conv1/kernel"] == pytest.approx(1 / np.sqrt(8 * 8 * 4))
    assert stds["fc/kernel"] == pytest.approx(1 / np.sqrt(7744))
    assert stds["out/kernel"] == pytest.approx(0.1 / np.sqrt(512))
    assert stds["fc/bias"] == 0.0
    scales = model.init_scales()
    assert scales.shape == (model.num_params,) and scales.dtype == np.float32


def test_nature_small_parameter_count():
    model = make_model("nature_small", 1, ATARI_OBS, ATARI_ACTIONS)
    # conv1 8*8*4*16+16, conv2 4*4*16*32+32, fc 11*11*32*256+256, out 256*18+18
    assert model.num_params == 4_112 + 8_224 + 991_488 + 4_626


# --------------------------------------------------------------------------- numerics


def test_nature_large_matches_float64_reference(large):
    model, params = large
    rng = np.random.default_rng(1)
    obs = atari_obs(rng, 2)
    indices = [2, 0]
    got = model.forward(indices, obs).numpy()
    for row, slot in enumerate(indices):
        want = reference_network(
            NATURE_LARGE, params[slot].astype(np.float64), 18, obs[row : row + 1] / 255.0
        )
        assert rel_error(got[row : row + 1], want) < 1e-5
    np.testing.assert_array_equal(model.act(indices, obs).numpy(), got.argmax(-1))


def test_subset_of_slots_equals_all_slots(large):
    model, _ = large
    obs = atari_obs(np.random.default_rng(2), 3)
    everyone = model.forward([0, 1, 2], obs).numpy()
    subset = model.forward([2, 0], obs[[2, 0]]).numpy()
    np.testing.assert_allclose(subset, everyone[[2, 0]], rtol=0, atol=1e-6)


def test_random_subsets_equal_all_slots():
    rng = np.random.default_rng(14)
    model = make_model("nature_small", 8, ATARI_OBS, ATARI_ACTIONS)
    model.load(np.arange(8), random_params(model, rng))
    obs = atari_obs(rng, 8)
    everyone = model.forward(np.arange(8), obs).numpy()
    for size in (1, 3, 6):
        subset = rng.permutation(8)[:size]
        got = model.forward(subset, obs[subset]).numpy()
        np.testing.assert_allclose(got, everyone[subset], rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_nature_small_matches_reference_in_both_dtypes(dtype):
    model = make_model("nature_small", 4, ATARI_OBS, ATARI_ACTIONS, dtype=dtype)
    rng = np.random.default_rng(3)
    params = random_params(model, rng)
    model.load(np.arange(4), params)
    obs = atari_obs(rng, 3)
    indices = [3, 1, 2]
    got = model.forward(indices, obs).numpy()
    want = np.concatenate(
        [
            reference_network(NATURE_SMALL, params[s].astype(np.float64), 18, obs[r : r + 1] / 255)
            for r, s in enumerate(indices)
        ]
    )
    # bfloat16 rounds every weight to 8 significant bits; measured error ~4e-3.
    assert rel_error(got, want) < (1e-5 if dtype == "float32" else 2e-2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gather_implementation_equals_custom_op(dtype):
    rng = np.random.default_rng(4)
    models = [
        make_model("nature_small", 3, ATARI_OBS, ATARI_ACTIONS, dtype=dtype, implementation=impl)
        for impl in ("op", "gather")
    ]
    params = random_params(models[0], rng)
    obs = atari_obs(rng, 2)
    outputs = []
    for model in models:
        model.load(np.arange(3), params)
        outputs.append(model.forward([2, 0], obs).numpy())
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)


def test_mlp_matches_reference_with_obs_normalisation():
    model = make_model(
        "mlp", 5, MUJOCO_OBS, MUJOCO_ACTIONS, hidden_sizes=(32, 32), observation_normalization=True
    )
    rng = np.random.default_rng(5)
    params = random_params(model, rng)
    model.load(np.arange(5), params)
    mean, std = rng.standard_normal(11), rng.uniform(0.5, 2.0, 11)
    model.set_obs_stats(mean, std)
    obs = (rng.standard_normal((3, 11)) * 3).astype(np.float32)
    indices = [4, 0, 2]
    normalised = np.clip(
        (obs.astype(np.float64) - mean.astype(np.float32)) / std.astype(np.float32), -5, 5
    )
    want = np.concatenate(
        [
            reference_network(
                MLP_32, params[s].astype(np.float64), 3, normalised[r : r + 1], "tanh"
            )
            for r, s in enumerate(indices)
        ]
    )
    got = model.forward(indices, obs).numpy()
    assert rel_error(got, want) < 1e-5
    low, high = MUJOCO_ACTIONS.low, MUJOCO_ACTIONS.high
    actions = model.act(indices, obs).numpy()
    np.testing.assert_allclose(actions, low + (np.tanh(got) + 1) / 2 * (high - low), atol=1e-6)


def test_clip_output_bounds_actions():
    model = make_model("mlp", 2, MUJOCO_OBS, MUJOCO_ACTIONS, hidden_sizes=(), output="clip")
    flat = np.full((2, model.num_params), 3.0, np.float32)
    model.load([0, 1], flat)
    obs = np.ones((2, 11), np.float32)
    raw = model.forward([0, 1], obs).numpy()
    np.testing.assert_array_equal(
        model.act([0, 1], obs).numpy(), np.clip(raw, MUJOCO_ACTIONS.low, MUJOCO_ACTIONS.high)
    )


def test_virtual_batch_norm_matches_reference(monkeypatch):
    # A tiny activation budget: statistics are computed one slot at a time.
    monkeypatch.setattr("neuroevo.models.sequential.REFERENCE_CHUNK_BYTES", 1)
    model = make_model("nature_small", 3, ATARI_OBS, ATARI_ACTIONS, virtual_batch_norm=True)
    rng = np.random.default_rng(6)
    params = random_params(model, rng)
    params[:, :] += 0.01  # non-zero biases, so their place after normalisation matters
    with pytest.raises(ValueError, match="set_reference_batch"):
        model.load(np.arange(3), params)
    reference_batch = atari_obs(rng, 8)
    model.set_reference_batch(reference_batch)
    model.load(np.arange(3), params)
    obs = atari_obs(rng, 2)
    indices = [1, 2]
    got = model.forward(indices, obs).numpy()
    want = np.concatenate(
        [
            reference_network(
                NATURE_SMALL,
                params[s].astype(np.float64),
                18,
                obs[r : r + 1] / 255.0,
                vbn_ref=reference_batch / 255.0,
            )
            for r, s in enumerate(indices)
        ]
    )
    assert rel_error(got, want) < 1e-4
    # A slot's output does not depend on which other slots run with it.
    np.testing.assert_allclose(model.forward([2], obs[1:]).numpy(), got[1:], atol=1e-6)


def test_custom_model_from_population_layers():
    obs_spec = ObservationSpec((9, 9, 3), tf.float32)
    layers = [Conv2D(8, 3, 2, "VALID", activation="elu"), Flatten(), Dense(5, "tanh")]
    model = SequentialModel(2, obs_spec, ActionSpec(True, 4), layers)
    assert [s.name for s in model.layout] == [
        "conv2d1/kernel",
        "conv2d1/bias",
        "dense3/kernel",
        "dense3/bias",
        "out/kernel",
        "out/bias",
    ]
    assert model.layout[0].shape == (3, 3, 3, 8) and model.layout[2].shape == (5, 4 * 4 * 8)
    model.load([0, 1], random_params(model, np.random.default_rng(7)))
    actions = model.act([1, 0], np.random.default_rng(8).random((2, 9, 9, 3), np.float32))
    assert actions.dtype == tf.int32 and actions.shape == (2,)


# ------------------------------------------------------------------------------ loading


def test_load_many_slots_and_read_back():
    model = make_model("nature_small", 6, ATARI_OBS, ATARI_ACTIONS)
    rng = np.random.default_rng(9)
    params = random_params(model, rng)
    model.load(np.arange(6), params)
    update = random_params(model, rng)[:2]
    model.load([4, 1], update)
    params[[4, 1]] = update
    np.testing.assert_array_equal(model.read(np.arange(6)).numpy(), params)


def test_bfloat16_load_rounds_and_keeps_float32_interface():
    model = make_model("nature_small", 2, ATARI_OBS, ATARI_ACTIONS, dtype="bfloat16")
    params = random_params(model, np.random.default_rng(10))
    model.load([0, 1], params)
    back = model.read([0, 1]).numpy()
    assert back.dtype == np.float32
    assert np.abs(back - params).max() <= np.abs(params).max() * 2**-8


def test_act_inside_a_user_graph_with_dynamic_batch(large):
    model, _ = large

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None, 84, 84, 4], tf.uint8),
        ]
    )
    def policy(indices, obs):
        return model.act(indices, obs)

    obs = atari_obs(np.random.default_rng(11), 2)
    np.testing.assert_array_equal(policy([1, 2], obs).numpy(), model.act([1, 2], obs).numpy())


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "indices, error, pattern",
    [
        # Host values are checked by neuroevo.core.indices before anything runs.
        ([0, 3], InvalidInputError, r"indices\[1\] = 3 is out of range: there are 3 slots"),
        ([1, 1], InvalidInputError, r"indices\[1\] = 1 duplicates indices\[0\]"),
        ([0.0, 1.0], InvalidInputError, "indices must be integers, got float64"),
        ([0, 2**32 + 1], InvalidInputError, r"indices\[1\] = 4294967297 is out of range"),
        ([[0, 1]], InvalidInputError, r"indices must be a vector"),
        (tf.constant([0, 1], tf.int64), TypeError, "indices must be a tensor of dtype int32"),
        ([0], ValueError, "obs has 2 rows but indices has 1 entries"),
    ],
)
def test_bad_indices_name_the_problem(large, indices, error, pattern):
    model, _ = large
    with pytest.raises(error, match=pattern):
        model.act(indices, atari_obs(np.random.default_rng(12), 2))


@pytest.mark.parametrize(
    ("implementation", "out_of_range", "repeated"),
    [
        # From the custom op ("is out of range") or a bias gather ("is not in"), whichever runs
        # first.
        ("op", r"indices\[1\] = 7 is (out of range|not in) \[0, 3\)", r"repeats indices\[0\]"),
        ("gather", "must lie in", "must be distinct"),
    ],
)
def test_graph_path_rejects_bad_index_tensors(implementation, out_of_range, repeated):
    """int32 tensors skip the host checks; the ops or graph assertions catch their values."""
    model = make_model("nature_small", 3, ATARI_OBS, ATARI_ACTIONS, implementation=implementation)
    obs = atari_obs(np.random.default_rng(13), 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=out_of_range):
        model.act(tf.constant([0, 7]), obs)
    with pytest.raises(tf.errors.InvalidArgumentError, match=repeated):
        model.act(tf.constant([2, 2]), obs)


def test_bad_observations_name_the_problem(large):
    model, _ = large
    with pytest.raises(TypeError, match="obs must be uint8 like the observation spec, got float32"):
        model.act([0], np.zeros((1, 84, 84, 4), np.float32))
    with pytest.raises(ValueError, match=r"obs must be \[k, 84, 84, 4\], got shape \(1, 84, 84\)"):
        model.act([0], np.zeros((1, 84, 84), np.uint8))


def test_bad_loads_name_the_problem(large):
    model, _ = large
    with pytest.raises(ValueError, match=r"flat_params must be \[k, 4052658\]"):
        model.load([0], np.zeros((1, 10), np.float32))
    with pytest.raises(TypeError, match="flat_params must be float32, got float64"):
        model.load([0], np.zeros((1, model.num_params)))
    with pytest.raises(InvalidInputError, match=r"slots\[1\] = 1 duplicates slots\[0\]"):
        model.load([1, 1], np.zeros((2, model.num_params), np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be distinct"):
        model.load(tf.constant([1, 1]), np.zeros((2, model.num_params), np.float32))
    with pytest.raises(InvalidInputError, match="slots must be integers, got float64"):
        model.load([0.9], np.zeros((1, model.num_params), np.float32))


@pytest.mark.parametrize(
    "build, pattern",
    [
        (
            lambda: make_model("nature_huge", 2, ATARI_OBS, ATARI_ACTIONS),
            "model: 'nature_huge' is not one of 'nature_large', 'nature_small', 'mlp'",
        ),
        (
            lambda: make_model("nature_large", 0, ATARI_OBS, ATARI_ACTIONS),
            "num_slots must be a positive integer",
        ),
        (
            lambda: make_model("nature_small", 2, ATARI_OBS, ATARI_ACTIONS, dtype="float16"),
            "dtype: 'float16' is not one of 'float32', 'bfloat16'",
        ),
        (
            lambda: make_model("nature_small", 2, MUJOCO_OBS, ATARI_ACTIONS),
            "expects image observations",
        ),
        (
            lambda: make_model("mlp", 2, ATARI_OBS, MUJOCO_ACTIONS),
            "mlp expects float32 vector observations",
        ),
        (
            lambda: make_model("mlp", 2, MUJOCO_OBS, MUJOCO_ACTIONS, hidden_sizes=(32, 0)),
            r"hidden_sizes\[1\]: 0 must be >= 1",
        ),
        (
            lambda: make_model("mlp", 2, MUJOCO_OBS, MUJOCO_ACTIONS, activation="hard_sigmoid"),
            "activation: 'hard_sigmoid' is not one of",
        ),
        (
            lambda: make_model("mlp", 2, MUJOCO_OBS, MUJOCO_ACTIONS, output="argmax"),
            "output='argmax' does not fit continuous actions",
        ),
        (
            lambda: make_model("nature_small", 2, ATARI_OBS, ATARI_ACTIONS, output="tanh"),
            "output='tanh' does not fit discrete actions",
        ),
        (
            lambda: make_model("mlp", 2, MUJOCO_OBS, MUJOCO_ACTIONS).set_obs_stats(
                np.zeros(11), np.ones(11)
            ),
            "observation_normalization=False",
        ),
        (
            lambda: make_model(
                "mlp", 2, MUJOCO_OBS, MUJOCO_ACTIONS, observation_normalization=True
            ).set_obs_stats(np.zeros(11), np.zeros(11)),
            "std positive",
        ),
        (
            lambda: make_model("mlp", 2, MUJOCO_OBS, MUJOCO_ACTIONS, output="sigmoid"),
            "output: 'sigmoid' is not one of",
        ),
        (
            lambda: make_model(
                "mlp",
                2,
                MUJOCO_OBS,
                ActionSpec(False, shape=(2,), low=np.full(2, -np.inf), high=np.full(2, np.inf)),
            ),
            "needs finite action bounds",
        ),
        (lambda: make_model("nature_small", 2, ATARI_OBS, ActionSpec(True, 0)), "num_actions >= 1"),
        (
            lambda: make_model("nature_small", 2, ATARI_OBS, ATARI_ACTIONS, device="/GPU:7"),
            "is not available",
        ),
        (
            lambda: SequentialModel(
                2,
                ObservationSpec((5, 5, 1), tf.float32),
                ATARI_ACTIONS,
                [Conv2D(4, 7, padding="VALID")],
            ),
            "does not fit the 5x5 input",
        ),
        (
            lambda: SequentialModel(
                2, ObservationSpec((5, 5, 1), tf.float32), ATARI_ACTIONS, [Dense(4)]
            ),
            "put a Flatten",
        ),
        (
            lambda: SequentialModel(
                2, MUJOCO_OBS, ATARI_ACTIONS, [Dense(4, name="a"), Dense(4, name="a")]
            ),
            "two layers are named 'a'",
        ),
        (lambda: Conv2D(8, 3, padding="same"), "padding must be 'SAME' or 'VALID'"),
    ],
)
def test_bad_configs_name_the_problem(build, pattern):
    with pytest.raises(ValueError, match=pattern):
        build()


def test_registry_lists_the_models():
    assert sorted(MODELS) == ["gru", "lstm", "mlp", "nature_large", "nature_small"]


# ---------------------------------------------------------------------------- placement

PLACEMENT_SCRIPT = textwrap.dedent(
    """
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from neuroevo.envs.base import ActionSpec, ObservationSpec
    from neuroevo.models import make_model

    spec, actions = ObservationSpec((84, 84, 4), tf.uint8), ActionSpec(True, 6)
    models = [make_model("nature_small", 2, spec, actions, device=d) for d in ("/CPU:1", "/CPU:0")]
    params = (models[0].init_scales() * np.random.default_rng(0).standard_normal(
        (2, models[0].num_params))).astype(np.float32)
    for m in models:
        m.load([0, 1], params)
    on_1 = models[0]
    assert on_1.device.endswith("CPU:1"), on_1.device
    assert all(v.device.endswith("CPU:1") for v in on_1.variables), on_1.variables

    graph = on_1._act_fn.get_concrete_function().graph
    ops = graph.get_operations()
    placed = [op for op in ops if op.device]
    assert placed and all(op.device.endswith("CPU:1") for op in placed), [
        (op.type, op.device) for op in placed if not op.device.endswith("CPU:1")]
    weight_ops = [op for op in ops if op.type.startswith("NeuroevoResourceIndexed")]
    assert len(weight_ops) == 4 and all(op.device.endswith("CPU:1") for op in weight_ops)
    # No dense read of any variable: a ReadVariableOp would copy a variable a scatter touched.
    assert not [op for op in ops if op.type == "ReadVariableOp"]

    obs = np.random.default_rng(1).integers(0, 256, (2, 84, 84, 4), dtype=np.uint8)
    np.testing.assert_array_equal(
        on_1.forward([1, 0], obs).numpy(), models[1].forward([1, 0], obs).numpy())
    print("placement ok")
    """
)


def test_variables_and_forward_pass_live_on_the_chosen_device():
    done = subprocess.run(
        [sys.executable, "-c", PLACEMENT_SCRIPT], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0 and "placement ok" in done.stdout, done.stderr[-3000:]
