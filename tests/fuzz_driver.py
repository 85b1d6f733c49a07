"""Fuzzes one op family with random bad calls; run as ``python tests/fuzz_driver.py FAMILY N``.

Run by ``tests/test_fuzz.py`` in a subprocess, so a crash (segfault, abort, bus error) fails
that test instead of killing pytest. For the family it builds a small env, model or evaluator,
records a fixed-seed episode, makes ``N`` random bad calls, each of which must raise
``InvalidArgumentError``, ``ValueError`` or ``TypeError`` (``EvaluationError`` for the
evaluator) with a non-empty message, then records the episode again. It prints one JSON line:
``{"calls": N, "rejected": ..., "accepted": [...], "same_episode": bool}``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

REJECTIONS: tuple[type[BaseException], ...] = (
    tf.errors.InvalidArgumentError,
    ValueError,
    TypeError,
)
SLOTS = 4


def bad_indices(rng: np.random.Generator, n: int) -> Any:
    """Slot ids that must be refused: each variant breaks one rule of ``neuroevo.indices``."""
    good = [int(i) for i in rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False)]
    variant = int(rng.integers(11))
    if variant == 0:  # out of range
        good[int(rng.integers(len(good)))] = int(rng.choice([-1, n, n + 7, 2**31 - 1, -(2**31)]))
        return good
    if variant == 1:  # int64 that an int32 cast would wrap onto a valid slot
        return np.array([*good[:-1], 2**32 + good[-1]], np.int64)
    if variant == 2:  # floats that truncation would turn into valid slots
        return np.array(good, np.float64) + rng.choice([0.0, 0.2, 0.9])
    if variant == 3:  # duplicates
        return [*good, good[0]]
    if variant == 4:
        return [good]  # a matrix
    if variant == 5:
        return tf.constant(good, tf.int64)
    if variant == 6:
        return tf.constant(good, tf.float32)
    if variant == 7:
        return ["0", None, object(), {"a": 1}, "slots"][int(rng.integers(5))]
    if variant == 8:
        return [bool(i % 2) for i in good]
    if variant == 9:
        return np.array(good, np.uint64) + np.uint64(2**63)
    return [*good[:-1], 2**70]  # beyond 64 bits


def bad_seeds(rng: np.random.Generator, k: int) -> Any:
    """Seeds for ``k`` slots that must be refused (never rounded or wrapped)."""
    variant = int(rng.integers(7))
    if variant == 0:
        return rng.random(k)  # 0.2 and 0.9 would both become seed 0
    if variant == 1:
        return [2**64 + i for i in range(k)]
    if variant == 2:
        return tf.constant(rng.random(k), tf.float32)
    if variant == 3:
        return np.zeros(k + 1, np.int64)  # one too many
    if variant == 4:
        return np.zeros((k, 2), np.int64)
    if variant == 5:
        return ["seed", None, object()][int(rng.integers(3))]
    return [True] * k


def episode(play: Callable[[], list[np.ndarray]]) -> list[np.ndarray]:
    return [np.asarray(x) for x in play()]


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b, strict=False)
    )


# ------------------------------------------------------------------------------------ envs


def env_family(family: str) -> tuple[Any, Callable[[], list[np.ndarray]], Callable]:
    """The env, its fixed-seed episode and its bad-call generator."""
    if family == "atari":
        from neuroevo.envs.atari import AtariEnv

        env = AtariEnv("pong", SLOTS, noop_max=3, max_episode_steps=10_000)
    elif family == "mujoco":
        from neuroevo.envs.mujoco import MujocoEnv

        env = MujocoEnv("Hopper", SLOTS, max_episode_steps=10_000)
    elif family == "maze":
        from neuroevo.envs.maze import MazeEnv

        env = MazeEnv("hard", SLOTS, max_episode_steps=10_000)
    else:
        from neuroevo.envs.gym import GymEnv

        env = GymEnv("CartPole-v1", SLOTS, threads=2)
    spec = env.action_spec
    action_rng = np.random.default_rng(0)
    if spec.discrete:
        actions = action_rng.integers(0, spec.num_actions, (20, 2)).astype(np.int32)
    else:
        actions = action_rng.uniform(-1, 1, (20, 2, *spec.shape)).astype(np.float32)

    def play() -> list[np.ndarray]:
        env.reset([1, 2], [11, 12])
        out = [env.observation([1, 2]).numpy()]
        for a in actions:
            result = env.step([1, 2], a)
            out += [result.reward.numpy(), env.observation([1, 2]).numpy()]
            if result.terminated.numpy().any() or result.truncated.numpy().any():
                break
        return out

    def good_actions(k: int) -> np.ndarray:
        if spec.discrete:
            return np.zeros(k, np.int32)
        return np.zeros((k, *spec.shape), np.float32)

    def bad_actions(rng: np.random.Generator, k: int) -> Any:
        variant = int(rng.integers(4))
        if spec.discrete:
            if variant == 0:
                return [int(rng.choice([-1, spec.num_actions, 2**31 - 1]))] * k
            if variant == 1:
                return [2**40] * k
            if variant == 2:
                return np.full(k, 1.5)
            return np.zeros(k + 1, np.int32)
        if variant == 0:
            return np.zeros((k, spec.shape[0] + 1), np.float32)
        if variant == 1:
            return np.zeros((k + 1, *spec.shape), np.float32)
        if variant == 2:
            return [["a"] * spec.shape[0]] * k
        return np.zeros(k, np.float32)

    readers = [env.observation, env.frames]
    if family != "atari":
        readers.append(env.flags)
    else:
        readers += [env.ram, env.lives, env.screen]
    if family == "maze":
        readers += [env.behavior, env.state]

    def bad_call(rng: np.random.Generator) -> None:
        kind = int(rng.integers(5))
        if kind == 0:
            indices = bad_indices(rng, SLOTS)
            readers[int(rng.integers(len(readers)))](indices)
        elif kind == 1:
            env.reset(bad_indices(rng, SLOTS), np.zeros(2, np.int64))
        elif kind == 2:
            env.step(bad_indices(rng, SLOTS), good_actions(2))
        elif kind == 3:
            env.reset([0, 3], bad_seeds(rng, 2))
        else:
            env.step([0, 3], bad_actions(rng, 2))

    env.reset(list(range(SLOTS)), list(range(SLOTS)))  # every slot steppable: only args are bad
    return env, play, bad_call


# ---------------------------------------------------------------------------------- models


def model_family() -> tuple[Any, Callable[[], list[np.ndarray]], Callable]:
    from neuroevo.envs.base import ActionSpec, ObservationSpec
    from neuroevo.models import make_model

    obs_spec = ObservationSpec((5,), tf.float32)
    model = make_model("mlp", SLOTS, obs_spec, ActionSpec(discrete=True, num_actions=3))
    rng = np.random.default_rng(1)
    weights = rng.standard_normal((SLOTS, model.num_params)).astype(np.float32)
    obs = rng.standard_normal((SLOTS, 5)).astype(np.float32)
    model.load(list(range(SLOTS)), weights)

    def play() -> list[np.ndarray]:
        return [model.forward([3, 0, 2, 1], obs), model.act([0, 1, 2, 3], obs), model.read([2])]

    def bad_call(rng: np.random.Generator) -> None:
        kind = int(rng.integers(5))
        indices = bad_indices(rng, SLOTS)
        k = len(indices) if isinstance(indices, list | np.ndarray) else 2
        if kind == 0:
            model.act(indices, obs[:k])
        elif kind == 1:
            model.forward(indices, obs[:k])
        elif kind == 2:
            model.load(indices, np.zeros((k, model.num_params), np.float32))
        elif kind == 3:
            model.read(indices)
        else:
            flat = [
                np.zeros((2, model.num_params), np.float64),
                np.zeros((2, model.num_params + 1), np.float32),
                np.zeros((3, model.num_params), np.float32),
                "weights",
            ][int(rng.integers(4))]
            model.load([0, 1], flat)

    return model, play, bad_call


# ------------------------------------------------------------------------------- evaluator


def evaluator_family() -> tuple[Any, Callable[[], list[np.ndarray]], Callable]:
    from neuroevo.envs.mujoco import MujocoEnv
    from neuroevo.evaluation import EvalRequest, EvaluationError, Evaluator
    from neuroevo.models import make_model

    global REJECTIONS
    REJECTIONS = (*REJECTIONS, EvaluationError)
    env = MujocoEnv("Hopper", SLOTS, max_episode_steps=30)
    model = make_model("mlp", SLOTS, env.observation_spec, env.action_spec, hidden_sizes=[8])

    def decode(genomes: list[Any]) -> np.ndarray:
        rows = [np.random.default_rng(int(g)).standard_normal(model.num_params) for g in genomes]
        return 0.1 * np.array(rows, np.float32)

    evaluator = Evaluator(env, model, decode, workers=2)
    seeds = np.arange(6, dtype=np.int64).reshape(3, 2)

    def play() -> list[np.ndarray]:
        results = evaluator.evaluate(EvalRequest([5, 6, 7], seeds))
        return [results.returns, results.lengths]

    def bad_call(rng: np.random.Generator) -> None:
        kind = int(rng.integers(8))
        if kind == 0:
            evaluator.evaluate(EvalRequest([5, 6, 7], bad_seeds(rng, 6)))
        elif kind == 1:
            evaluator.evaluate(EvalRequest([5, 6, 7], rng.random((3, 2))))
        elif kind == 2:
            noise_std = [-0.1, float("nan"), True, "0.1"][int(rng.integers(4))]
            evaluator.evaluate(EvalRequest([5, 6, 7], seeds, action_noise_std=noise_std))
        elif kind == 3:
            max_steps = [0, -5, 2.5, "10"][int(rng.integers(4))]
            evaluator.evaluate(EvalRequest([5, 6, 7], seeds), max_steps=max_steps)
        elif kind == 4:
            evaluator.evaluate(EvalRequest([5, 6, 7], seeds, sample_obs=np.ones((2, 2), bool)))
        elif kind == 5:
            evaluator.evaluate(EvalRequest([5, 6, 7], seeds[:2]))
        elif kind == 6:
            evaluator.evaluate(
                EvalRequest([5, "not a genome", 7], seeds)
            )  # decode fails in a worker
        else:
            evaluator.evaluate(EvalRequest([5, 6, 7], seeds, sample_obs=np.ones((3, 2), np.int64)))

    return evaluator, play, bad_call


def main(family: str, calls: int) -> None:
    if family in ("atari", "mujoco", "gym", "maze"):
        _, play, bad_call = env_family(family)
    elif family == "models":
        _, play, bad_call = model_family()
    else:
        _, play, bad_call = evaluator_family()
    before = episode(play)
    rng = np.random.default_rng(2024)
    rejected, accepted = 0, []
    for trial in range(calls):
        try:
            bad_call(rng)
        except REJECTIONS as exc:
            if not str(exc).strip():
                accepted.append(f"trial {trial}: {type(exc).__name__} without a message")
            else:
                rejected += 1
        else:
            accepted.append(f"trial {trial}: accepted")
    after = episode(play)
    print(
        json.dumps(
            {
                "calls": calls,
                "rejected": rejected,
                "accepted": accepted[:10],
                "same_episode": same(before, after),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
