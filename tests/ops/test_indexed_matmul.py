"""The core custom ops: indexed matmul and indexed conv2d against float64 references.

``NeuroevoIndexedMatmul`` (weights in a plain tensor) is test-only and lives in the
``core_testing`` library; models use the resource forms of the ``core`` library."""

from __future__ import annotations

import platform

import numpy as np
import pytest
import tensorflow as tf

from neuroevo import ops

core = ops.load("core")
core_testing = ops.load("core_testing")


def widen(w: np.ndarray, dtype: tf.DType) -> np.ndarray:
    """The weights the op multiplies by: rounded to ``dtype``, as float64."""
    return tf.cast(tf.cast(w, dtype), tf.float64).numpy()


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
@pytest.mark.parametrize("transpose_w", [True, False])
@pytest.mark.parametrize("m", [None, 1, 3, 20])  # None: x is [k, in]; 20 takes the GEMM path
def test_matmul_matches_float64(dtype, transpose_w, m):
    rng = np.random.default_rng(0)
    slots, out, inp = 7, 37, 53
    w = rng.standard_normal((slots, out, inp) if transpose_w else (slots, inp, out))
    w = w.astype(np.float32)
    indices = np.array([5, 0, 3, 6], np.int32)
    x_shape = (4, inp) if m is None else (4, m, inp)
    x = rng.standard_normal(x_shape).astype(np.float32)

    y = core_testing.neuroevo_indexed_matmul(x, tf.cast(w, dtype), indices, transpose_w=transpose_w)
    y_resource = core.neuroevo_resource_indexed_matmul(
        x,
        tf.Variable(tf.cast(w, dtype)).handle,
        indices,
        bias=[],
        dtype=dtype,
        transpose_w=transpose_w,
    )

    wd = widen(w, dtype)[indices]
    if transpose_w:
        wd = np.swapaxes(wd, 1, 2)
    x3 = x.astype(np.float64).reshape(4, -1, inp)
    want = np.einsum("kmi,kio->kmo", x3, wd).reshape((*x_shape[:-1], out))
    assert y.shape == want.shape
    # With AVX512_BF16, bfloat16 dot products take x as two bfloat16 halves (16 significant
    # bits, relative error ~2^-17 per input); float32 kernels multiply x exactly.
    assert rel_error(y, want) < (1e-6 if dtype == tf.float32 else 2e-5)
    np.testing.assert_array_equal(y.numpy(), y_resource.numpy())


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
@pytest.mark.parametrize(
    "kernel, stride, channels, filters, size, padding",
    [
        (8, 4, 4, 32, 84, "SAME"),  # nature conv1 (direct: stride x channels = 16 floats)
        (4, 4, 4, 20, 30, "VALID"),  # direct, VALID, a partial panel
        (8, 2, 8, 16, 19, "SAME"),  # direct, kernel rows of 4 chunks, odd size
        (4, 2, 32, 64, 21, "SAME"),  # nature conv2
        (4, 2, 16, 32, 21, "SAME"),  # nature_small conv2 (direct: 32 floats per column)
        (3, 1, 32, 16, 17, "VALID"),  # direct at 32 floats, kernel rows of 6 chunks
        (3, 2, 5, 20, 9, "VALID"),  # filters not a multiple of 16
        (5, 3, 3, 70, 13, "SAME"),  # more than one 64-wide panel
    ],
)
def test_conv2d_matches_float64(dtype, kernel, stride, channels, filters, size, padding):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((5, kernel, kernel, channels, filters)).astype(np.float32)
    x = rng.standard_normal((3, 2, size, size, channels)).astype(np.float32)
    indices = np.array([4, 0, 2], np.int32)

    y = core.neuroevo_resource_indexed_conv2d(
        x,
        tf.Variable(tf.cast(w, dtype)).handle,
        indices,
        bias=[],
        dtype=dtype,
        stride=stride,
        padding=padding,
    )

    wd = widen(w, dtype)
    want = np.stack(
        [
            tf.nn.conv2d(x[r].astype(np.float64), wd[slot], stride, padding).numpy()
            for r, slot in enumerate(indices)
        ]
    )
    assert y.shape == want.shape
    assert rel_error(y, want) < 1e-6


def test_conv2d_rank4_input_is_one_input_per_slot():
    rng = np.random.default_rng(2)
    w = tf.Variable(rng.standard_normal((3, 3, 3, 2, 16)).astype(np.float32))
    x = rng.standard_normal((2, 7, 7, 2)).astype(np.float32)
    y4 = core.neuroevo_resource_indexed_conv2d(x, w.handle, [2, 1], bias=[], dtype=tf.float32)
    y5 = core.neuroevo_resource_indexed_conv2d(
        x[:, None], w.handle, [2, 1], bias=[], dtype=tf.float32
    )
    np.testing.assert_array_equal(y4.numpy(), y5.numpy()[:, 0])


def test_reads_weights_written_by_scatter_in_place():
    w = tf.Variable(tf.zeros([4, 2, 3]))
    w.scatter_update(tf.IndexedSlices(tf.ones([1, 2, 3]), [2]))
    y = core.neuroevo_resource_indexed_matmul(
        tf.ones([2, 3]), w.handle, [2, 0], bias=[], dtype=tf.float32
    )
    np.testing.assert_array_equal(y.numpy(), [[3, 3], [0, 0]])


def test_empty_indices_give_empty_output():
    w = tf.Variable(tf.ones([4, 2, 3]))
    y = core.neuroevo_resource_indexed_matmul(
        tf.zeros([0, 3]), w.handle, tf.zeros([0], tf.int32), bias=[], dtype=tf.float32
    )
    assert y.shape == (0, 2)


def test_shape_inference_with_unknown_rows():
    w = tf.Variable(tf.ones([4, 5, 6]))
    kernel = tf.Variable(tf.ones([4, 3, 3, 2, 8]))

    @tf.function(input_signature=[tf.TensorSpec([None, 6]), tf.TensorSpec([None], tf.int32)])
    def dense(x, idx):
        y = core.neuroevo_resource_indexed_matmul(x, w.handle, idx, bias=[], dtype=tf.float32)
        assert y.shape.as_list() == [None, 5]
        return y

    @tf.function(
        input_signature=[tf.TensorSpec([None, 1, 9, 9, 2]), tf.TensorSpec([None], tf.int32)]
    )
    def conv(x, idx):
        y = core.neuroevo_resource_indexed_conv2d(
            x, kernel.handle, idx, bias=[], dtype=tf.float32, stride=2
        )
        assert y.shape.as_list() == [None, 1, 5, 5, 8]
        return y

    dense.get_concrete_function()
    conv.get_concrete_function()


@pytest.mark.parametrize(
    "x_shape, indices, pattern",
    [
        ((2, 3), [0, 9], r"indices\[1\] = 9 is out of range \[0, 4\)"),
        ((2, 3), [0, -1], r"indices\[1\] = -1 is out of range"),
        ((3, 3), [1, 2, 1], r"indices\[2\] = 1 repeats indices\[0\]"),
        ((2, 3), [0], r"x has 2 rows but indices has 1 entries"),
        ((2, 5), [0, 1], r"x has 5 input features but w .* expects 3"),
        ((2, 2, 2, 3), [0, 1], r"x must be \[k, in\] or \[k, m, in\]"),
    ],
)
def test_matmul_bad_input_names_the_problem(x_shape, indices, pattern):
    w = tf.Variable(tf.ones([4, 2, 3]))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=pattern):
        core.neuroevo_resource_indexed_matmul(
            tf.ones(x_shape), w.handle, tf.constant(indices, tf.int32), bias=[], dtype=tf.float32
        )


def test_conv2d_bad_input_names_the_problem():
    kernel = tf.Variable(tf.ones([4, 3, 3, 2, 8]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[0\] = 4 is out of range"):
        core.neuroevo_resource_indexed_conv2d(
            tf.ones([1, 5, 5, 2]), kernel.handle, [4], bias=[], dtype=tf.float32
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match="x has 3 channels"):
        core.neuroevo_resource_indexed_conv2d(
            tf.ones([1, 5, 5, 3]), kernel.handle, [0], bias=[], dtype=tf.float32
        )


def test_wrong_variable_dtype_is_reported():
    w = tf.Variable(tf.ones([4, 2, 3], tf.bfloat16))
    with pytest.raises(tf.errors.InvalidArgumentError, match="holds bfloat16"):
        core.neuroevo_resource_indexed_matmul(
            tf.ones([1, 3]), w.handle, [0], bias=[], dtype=tf.float32
        )


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
@pytest.mark.parametrize("transpose_w", [True, False])
@pytest.mark.parametrize("m", [None, 20])  # dot products (bfloat16: vdpbf16ps) and GEMM
@pytest.mark.parametrize("activation", ["linear", "relu", "tanh"])
def test_matmul_fused_bias_and_activation(dtype, transpose_w, m, activation):
    """The fused epilogue gives the bits of the unfused ops: float32 bias add, then the
    activation (tanh: TensorFlow's x86 kernel; elsewhere within a few ulps of it)."""
    rng = np.random.default_rng(3)
    slots, out, inp = 6, 45, 70
    w = rng.standard_normal((slots, out, inp) if transpose_w else (slots, inp, out))
    bias = rng.standard_normal((slots, out)).astype(np.float32)
    indices = np.array([4, 1, 5], np.int32)
    x = rng.standard_normal((3, inp) if m is None else (3, m, inp)).astype(np.float32)
    weights = tf.Variable(tf.cast(w.astype(np.float32), dtype))

    plain = core.neuroevo_resource_indexed_matmul(
        x, weights.handle, indices, bias=[], dtype=dtype, transpose_w=transpose_w
    )
    fused = core.neuroevo_resource_indexed_matmul(
        x,
        weights.handle,
        indices,
        bias=[tf.Variable(bias).handle],
        dtype=dtype,
        transpose_w=transpose_w,
        activation=activation,
    )

    shape = [3] + [1] * (x.ndim - 2) + [out]
    want = plain.numpy() + bias[indices].reshape(shape)
    if activation == "relu":
        want = np.maximum(want, 0.0)
    if activation == "tanh":
        want = tf.math.tanh(want).numpy()
    _assert_bits(fused.numpy(), want)


def _assert_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Bit-equal on x86-64; elsewhere TensorFlow's own tanh fuses multiply-adds (NEON), so
    within a few float32 ulps."""
    if platform.machine() in ("x86_64", "AMD64"):
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_fused_tanh_has_tensorflow_bits_over_the_whole_range(rng):
    """y = tanh(values) through a 1-input Dense (weights = values, x = 1, bias 0): small,
    large, saturated and special values against tf.math.tanh, in full vectors and tails."""
    values = np.concatenate(
        [rng.standard_normal(4000) * scale for scale in (1e-4, 0.01, 0.3, 1.0, 3.0, 8.0, 100.0)]
        + [[0.0, 7.9073896, -7.9073896, 7.9073897, 1e30, -1e30, np.inf, -np.inf]]
    ).astype(np.float32)
    for out in (values.size, 13):  # 13: one partial vector on every target
        w = values[:out].reshape(1, out, 1)
        fused = core.neuroevo_resource_indexed_matmul(
            np.ones((1, 1), np.float32),
            tf.Variable(w).handle,
            np.array([0], np.int32),
            bias=[tf.Variable(np.zeros((1, out), np.float32)).handle],
            dtype=tf.float32,
            activation="tanh",
        )
        _assert_bits(fused.numpy()[0], tf.math.tanh(values[:out]).numpy())
    nan = core.neuroevo_resource_indexed_matmul(
        np.ones((1, 1), np.float32),
        tf.Variable(np.full((1, 3, 1), np.nan, np.float32)).handle,
        np.array([0], np.int32),
        bias=[tf.Variable(np.zeros((1, 3), np.float32)).handle],
        dtype=tf.float32,
        activation="tanh",
    )
    assert np.isnan(nan.numpy()).all()


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_conv2d_uint8_input_fused_bias_and_relu(dtype):
    rng = np.random.default_rng(4)
    w = rng.standard_normal((4, 8, 8, 4, 16)).astype(np.float32)
    bias = rng.standard_normal((4, 16)).astype(np.float32)
    pixels = rng.integers(0, 256, (2, 1, 84, 84, 4), dtype=np.uint8)
    indices = np.array([3, 0], np.int32)
    weights = tf.Variable(tf.cast(w, dtype))

    fused = core.neuroevo_resource_indexed_conv2d(
        pixels,
        weights.handle,
        indices,
        bias=[tf.Variable(bias).handle],
        dtype=dtype,
        stride=4,
        input_scale=1 / 255,
        activation="relu",
    )

    scaled = tf.cast(pixels, tf.float32) * (1 / 255)  # as the model's preprocess computes it
    plain = core.neuroevo_resource_indexed_conv2d(
        scaled, weights.handle, indices, bias=[], dtype=dtype, stride=4
    )
    want = np.maximum(plain.numpy() + bias[indices][:, None, None, None], 0.0)
    np.testing.assert_allclose(fused.numpy(), want, rtol=1e-6, atol=1e-6)


def test_bad_bias_names_the_problem():
    w = tf.Variable(tf.ones([4, 2, 3]))
    kernel = tf.Variable(tf.ones([4, 3, 3, 2, 8]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bias must be \[4, 2\]"):
        core.neuroevo_resource_indexed_matmul(
            tf.ones([1, 3]),
            w.handle,
            [0],
            bias=[tf.Variable(tf.ones([4, 3])).handle],
            dtype=tf.float32,
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bias must be \[4, 8\]"):
        core.neuroevo_resource_indexed_conv2d(
            tf.ones([1, 5, 5, 2]),
            kernel.handle,
            [0],
            bias=[tf.Variable(tf.ones([3, 8])).handle],
            dtype=tf.float32,
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match="the bias variable holds double"):
        core.neuroevo_resource_indexed_matmul(
            tf.ones([1, 3]),
            w.handle,
            [0],
            bias=[tf.Variable(tf.ones([4, 2], tf.float64)).handle],
            dtype=tf.float32,
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match="at most one bias"):
        core.neuroevo_resource_indexed_matmul(
            tf.ones([1, 3]), w.handle, [0], bias=[w.handle, w.handle], dtype=tf.float32
        )


def random_slots(rng: np.random.Generator, num_slots: int, k: int) -> np.ndarray:
    """k distinct slots in random order: a subset, as the policy step passes them."""
    return rng.permutation(num_slots)[:k].astype(np.int32)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
@pytest.mark.parametrize("transpose_w", [True, False])
def test_dense_vector_tails_match_float64(dtype, transpose_w):
    """Sizes around every vector width (4, 8, 16 floats; 2x that for bfloat16 pairs) and row
    counts around the 4-row blocks, with bias and relu, against a float64 reference."""
    rng = np.random.default_rng(5)
    slots = 9
    for inp, out in [(1, 1), (7, 2), (9, 5), (16, 3), (17, 8), (33, 6), (47, 4), (64, 9)]:
        shape = (slots, out, inp) if transpose_w else (slots, inp, out)
        w = rng.standard_normal(shape).astype(np.float32)
        bias = rng.standard_normal((slots, out)).astype(np.float32)
        indices = random_slots(rng, slots, 5)
        x = rng.standard_normal((5, inp)).astype(np.float32)
        y = core.neuroevo_resource_indexed_matmul(
            x,
            tf.Variable(tf.cast(w, dtype)).handle,
            indices,
            bias=[tf.Variable(bias).handle],
            dtype=dtype,
            transpose_w=transpose_w,
            activation="relu",
        )
        wd = widen(w, dtype)[indices]
        if transpose_w:
            wd = np.swapaxes(wd, 1, 2)
        want = np.einsum("ki,kio->ko", x.astype(np.float64), wd) + bias[indices]
        want = np.maximum(want, 0.0)
        err = np.abs(y.numpy() - want).max() / max(np.abs(want).max(), 1e-3)
        assert err < (1e-6 if dtype == tf.float32 else 2e-5), (inp, out, err)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_conv2d_vector_tails_match_float64(dtype):
    """Filter counts around every vector width and panel (partial last vectors, one to four
    vectors per panel), direct and packed geometries, uint8 input, bias and relu, two inputs
    per slot, a random subset of slots, against a float64 reference."""
    rng = np.random.default_rng(6)
    slots = 6
    geometries = [  # kernel, stride, channels, size, padding
        (8, 4, 4, 20, "SAME"),  # direct (16 floats per output column)
        (4, 2, 16, 9, "SAME"),  # direct (32 floats per output column)
        (3, 1, 3, 8, "VALID"),  # packed patches, 27-element patch
    ]
    for filters in [1, 7, 8, 9, 17, 24, 33]:
        for kernel, stride, channels, size, padding in geometries:
            w = rng.standard_normal((slots, kernel, kernel, channels, filters)).astype(np.float32)
            bias = rng.standard_normal((slots, filters)).astype(np.float32)
            pixels = rng.integers(0, 256, (3, 2, size, size, channels), dtype=np.uint8)
            indices = random_slots(rng, slots, 3)
            y = core.neuroevo_resource_indexed_conv2d(
                pixels,
                tf.Variable(tf.cast(w, dtype)).handle,
                indices,
                bias=[tf.Variable(bias).handle],
                dtype=dtype,
                stride=stride,
                padding=padding,
                input_scale=1 / 255,
                activation="relu",
            )
            x = pixels.astype(np.float64) * np.float64(np.float32(1 / 255))
            wd = widen(w, dtype)
            want = np.stack(
                [
                    tf.nn.conv2d(x[r], wd[slot], stride, padding).numpy() + bias[slot]
                    for r, slot in enumerate(indices)
                ]
            )
            want = np.maximum(want, 0.0)
            assert y.shape == want.shape
            err = rel_error(y, want)
            assert err < 1e-6, (filters, kernel, stride, channels, err)
