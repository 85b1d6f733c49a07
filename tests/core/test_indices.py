"""neuroevo.core.indices: slot ids and seeds are never cast, on every env kind and on the models.

The reference is the intent itself: an index or seed either reaches the op unchanged or the
call is refused. Each silent cast found before (an int64 ``2**32 + 3`` stepping slot 3, an
index 2.9 touching slot 2, seeds 0.2 and 0.9 both becoming 0) is checked on each backend.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from neuroevo import ops
from neuroevo.core.indices import (
    MAX_SLOTS,
    InvalidInputError,
    check_indices,
    check_num_slots,
    index_tensor,
    seed_array,
    seed_tensor,
)
from neuroevo.envs.base import ActionSpec, EnvClosedError, ObservationSpec
from neuroevo.models import make_model

MAKE_ATTRS = {
    "frame_skip": 0,
    "reset_noise_scale": -1.0,
    "max_episode_steps": 0,
    "terminate_when_unhealthy": True,
}
"""The raw make op's settings (it has no defaults of its own; 0 / -1 mean the task's)."""

# ------------------------------------------------------------------------------ the module


def test_valid_host_values_pass_unchanged() -> None:
    for indices in ([3, 0, 2], np.array([3, 0, 2], np.uint8), np.array([3, 0, 2], np.int64)):
        tensor = index_tensor(indices, 4)
        assert tensor.dtype == tf.int32 and tensor.numpy().tolist() == [3, 0, 2]
    assert index_tensor([], 4).shape == (0,)
    seeds = seed_tensor(np.array([0, 2**64 - 1], np.uint64))  # a seed is a bit pattern
    assert seeds.dtype == tf.int64 and seeds.numpy().tolist() == [0, -1]
    assert seed_array([[1, -(2**63)]]).tolist() == [[1, -(2**63)]]


@pytest.mark.parametrize(
    ("indices", "message"),
    [
        (np.array([2**32 + 3]), r"indices\[0\] = 4294967299 is out of range: there are 4 slots"),
        ([2.9], "indices must be integers, got float64"),
        ([True], "indices must be integers, got bool"),
        ([0, 2**70], "indices must be integers, got Python ints beyond 64 bits"),
        ([1, 3, 1], r"indices\[2\] = 1 duplicates indices\[0\]"),
        ([-1], r"indices\[0\] = -1 is out of range"),
        ([[0]], r"indices must be a vector \[k\], got shape \[1,1\]"),
    ],
)
def test_bad_host_indices_are_refused(indices, message) -> None:
    with pytest.raises(InvalidInputError, match=message) as info:
        index_tensor(indices, 4)
    assert isinstance(info.value, tf.errors.InvalidArgumentError | ValueError)


def test_tensors_are_never_cast() -> None:
    with pytest.raises(TypeError, match="indices must be a tensor of dtype int32, got int64"):
        index_tensor(tf.constant([2**32 + 3], tf.int64), 4)
    with pytest.raises(TypeError, match="seeds must be a tensor of dtype int64, got float32"):
        seed_tensor(tf.constant([0.2, 0.9]))
    with pytest.raises(InvalidInputError, match="seeds must be integers, got float64"):
        seed_tensor([0.2, 0.9])
    graph_indices = tf.TensorSpec([None], tf.int32)
    traced = tf.function(lambda i: index_tensor(i, 4)).get_concrete_function(graph_indices)
    assert traced.structured_outputs.dtype == tf.int32  # passed on; the op checks values


def test_check_indices_reports_the_first_problem_like_the_ops() -> None:
    assert check_indices(np.array([1, 0], np.int64), 2).dtype == np.int32
    with pytest.raises(InvalidInputError, match=r"slots\[3\] = 2 duplicates slots\[1\]"):
        check_indices(np.array([0, 2, 1, 2]), 3, "slots")


def test_num_slots_is_bounded() -> None:
    assert check_num_slots(MAX_SLOTS) == MAX_SLOTS
    with pytest.raises(ValueError, match=r"num_slots must be in \[1, 65536\], got 1000000000"):
        check_num_slots(10**9)
    with pytest.raises(ValueError, match=r"num_slots must be an int in \[1, 65536\], got 2.0"):
        check_num_slots(2.0)


# -------------------------------------------------------------------------------- backends


def test_mujoco_refuses_silent_casts_and_huge_slot_counts() -> None:
    from neuroevo.envs.mujoco import MujocoEnv, model_path

    with pytest.raises(ValueError, match=r"num_slots must be in \[1, 65536\], got 1000000000"):
        MujocoEnv("Hopper", 10**9)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"num_slots must be in \[1, 65536\]"):
        ops.load("mujoco").neuroevo_mujoco_make(
            task="Hopper", xml_path=str(model_path("Hopper")), num_slots=10**9, **MAKE_ATTRS
        )
    env = MujocoEnv("Hopper", 4)
    env.reset([0, 1, 2, 3], [0, 1, 2, 3])
    actions = np.zeros((1, 3), np.float32)
    with pytest.raises(InvalidInputError, match="4294967299 is out of range"):
        env.step(np.array([2**32 + 3]), actions)
    with pytest.raises(InvalidInputError, match="indices must be integers"):
        env.step(np.array([2.9]), actions)
    with pytest.raises(InvalidInputError, match="seeds must be integers"):
        env.reset([0, 1], [0.2, 0.9])
    with pytest.raises(InvalidInputError, match="actions must be numbers, got str"):
        env.step([0], [["a", "b", "c"]])
    assert env.frames([3]).numpy().tolist() == [0]  # nothing above stepped slot 3
    env.close()
    with pytest.raises(EnvClosedError, match=r"MujocoEnv\('Hopper', num_slots=4\) is closed"):
        env.step([0], actions)


def test_gym_adapter_refuses_silent_casts_and_works_after_close_only_as_an_error() -> None:
    from neuroevo.envs.gym import GymEnv

    env = GymEnv("CartPole-v1", 4, threads=1)
    env.reset([0, 1, 2, 3], [0, 1, 2, 3])
    with pytest.raises(InvalidInputError, match="4294967299 is out of range"):
        env.step(np.array([2**32 + 3]), [0])
    with pytest.raises(InvalidInputError, match="seeds must be integers"):
        env.reset([0, 1], [0.2, 0.9])
    with pytest.raises(InvalidInputError, match="actions must be integers, got float64"):
        env.step([0], [1.7])
    with pytest.raises(ValueError, match=r"num_slots must be in \[1, 65536\]"):
        GymEnv("CartPole-v1", 10**9)
    env.close()
    with pytest.raises(EnvClosedError, match=r"GymEnv\('CartPole-v1', num_slots=4\) is closed"):
        env.observation([0])


def test_models_refuse_silent_casts() -> None:
    model = make_model(
        "mlp", 4, ObservationSpec((3,), tf.float32), ActionSpec(discrete=True, num_actions=2)
    )
    obs = np.zeros((1, 3), np.float32)
    for call in (model.act, model.forward):
        with pytest.raises(InvalidInputError, match="4294967299 is out of range"):
            call(np.array([2**32 + 3]), obs)
        with pytest.raises(InvalidInputError, match="indices must be integers"):
            call([2.9], obs)
        with pytest.raises(TypeError, match="must be a tensor of dtype int32"):
            call(tf.constant([3], tf.int64), obs)
    with pytest.raises(InvalidInputError, match="slots must be integers"):
        model.load([2.9], np.zeros((1, model.num_params), np.float32))
    with pytest.raises(InvalidInputError, match=r"slots\[0\] = 4294967299 is out of range"):
        model.read(np.array([2**32 + 3]))
