"""The bfloat16 ceiling of ``python -m benchmarks forward``: its bookkeeping (no timing)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import forward
from neuroevo.models import make_model


@pytest.mark.parametrize("name", ["nature_small", "nature_large"])
def test_dense_and_convolution_bytes_add_up_to_the_whole_network(name: str) -> None:
    model = make_model(name, 2, forward.OBS_SPEC, forward.ACTION_SPEC)
    conv_params = sum(
        int(np.prod(v.shape[1:]))
        for layer in model.layers
        if isinstance(layer, forward.Conv2D)
        for v in layer.variables
    )
    assert forward.dense_weight_bytes(model, kernel_bytes=4) + 4 * conv_params == (
        4 * model.num_params
    )
    dense_biases = sum(
        int(layer.bias.shape[1]) for layer in model.layers if isinstance(layer, forward.Dense)
    )
    # bfloat16 kernels halve the kernels' bytes; biases stay float32.
    assert 2 * forward.dense_weight_bytes(model, kernel_bytes=2) == (
        forward.dense_weight_bytes(model, kernel_bytes=4) + 4 * dense_biases
    )


def test_ceiling_adds_the_convolutions_time_to_the_dense_bytes_time() -> None:
    # 1 ms of convolutions and 1 MB of dense weights at 1 GB/s: 2 ms per forward.
    assert forward.bf16_ceiling(1000.0, 1e9, 1_000_000) == pytest.approx(500.0)
    # Free convolutions: the dense bytes alone.
    assert forward.bf16_ceiling(float("inf"), 2e9, 1_000_000) == pytest.approx(2000.0)


def test_convolutions_run_the_layers_before_the_first_dense_one(rng) -> None:
    model = make_model("nature_small", 3, forward.OBS_SPEC, forward.ACTION_SPEC)
    slots = np.arange(3, dtype=np.int32)
    model.load(slots, rng.standard_normal((3, model.num_params), dtype=np.float32) * 0.05)
    obs = rng.integers(0, 256, (3, *forward.OBS_SPEC.shape), dtype=np.uint8)
    features = forward.convolutions(model)(slots, obs).numpy()
    assert features.shape[:2] == (3, 1)
    # The dense layers applied to these features give the model's own outputs.
    first_dense = next(
        i for i, layer in enumerate(model.layers) if isinstance(layer, forward.Dense)
    )
    x = features
    for layer in model.layers[first_dense:]:
        x = layer(slots, x)
    np.testing.assert_allclose(x.numpy()[:, 0], model.forward(slots, obs).numpy(), rtol=1e-5)
