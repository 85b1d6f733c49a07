"""Running observation statistics: exact moments, merging order, blow-ups, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

from neuroevo.evaluation.obs_norm import RunningObsStats


def test_moments_match_numpy_whatever_the_batching():
    rng = np.random.default_rng(0)
    data = rng.normal([3.0, -1.0, 1e4], [2.0, 0.5, 1e-3], size=(1000, 3))
    stats = RunningObsStats((3,), min_std=1e-6)
    for chunk in np.array_split(data, [1, 7, 300, 301]):
        stats.update(chunk)
    assert stats.count == 1000
    np.testing.assert_allclose(stats.mean, data.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(stats.std, data.std(axis=0), rtol=1e-4)


def test_defaults_floor_and_non_finite_rows():
    stats = RunningObsStats((2,))
    np.testing.assert_array_equal(stats.mean, [0, 0])
    np.testing.assert_array_equal(stats.std, [1, 1])
    stats.update(np.array([[1.0, 5.0], [np.nan, 0.0], [1.0, np.inf], [1.0, 7.0]]))
    assert stats.count == 2
    np.testing.assert_allclose(stats.mean, [1.0, 6.0])
    np.testing.assert_allclose(stats.std, [0.1, 1.0])  # constant feature: floored at min_std
    assert stats.mean.dtype == np.float32 and stats.std.dtype == np.float32


def test_state_dict_round_trip_and_validation():
    stats = RunningObsStats((2,))
    stats.update(np.arange(10.0).reshape(5, 2))
    restored = RunningObsStats((2,))
    restored.load_state_dict(stats.state_dict())
    assert restored.count == 5
    np.testing.assert_array_equal(restored.std, stats.std)
    with pytest.raises(ValueError, match="do not fit observations"):
        RunningObsStats((3,)).load_state_dict(stats.state_dict())
    with pytest.raises(ValueError, match="lacks"):
        restored.load_state_dict({"mean": np.zeros(2)})
    with pytest.raises(ValueError, match="batch must have shape"):
        stats.update(np.zeros((4, 3)))


def test_merge_equals_one_accumulator_over_all_rows(rng):
    parts = [
        rng.normal(rng.normal(size=5) * 100, rng.uniform(0.1, 10, 5), (n, 5)) for n in (1, 7, 40)
    ]
    merged, whole = RunningObsStats((5,)), RunningObsStats((5,))
    for part in parts:
        single = RunningObsStats((5,))
        single.update(part)
        merged.merge(single)
    whole.update(np.concatenate(parts))
    assert merged.count == whole.count == 48
    np.testing.assert_allclose(merged.mean, whole.mean, rtol=1e-6)
    np.testing.assert_allclose(merged.std, whole.std, rtol=1e-6)
    with pytest.raises(ValueError, match="do not fit"):
        merged.add_moments(3, np.zeros(4), np.zeros(4))
