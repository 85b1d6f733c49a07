"""Fuzzes one op family with random bad calls; run as ``python tests/fuzz_driver.py FAMILY N``.

Run by ``tests/ops/test_fuzz.py`` in a subprocess, so a crash (segfault, abort, bus error) fails
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
    """Slot ids that must be refused: each variant breaks one rule of ``neuroevo.core.indices``."""
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
        kind = int(rng.integers(6))
        if kind == 0:
            indices = bad_indices(rng, SLOTS)
            readers[int(rng.integers(len(readers)))](indices)
        elif kind == 1:
            env.reset(bad_indices(rng, SLOTS), np.zeros(2, np.int64))
        elif kind == 2:
            env.step(bad_indices(rng, SLOTS), good_actions(2))
        elif kind == 3:
            env.reset([0, 3], bad_seeds(rng, 2))
        elif kind == 4:
            env.step([0, 3], bad_actions(rng, 2))
        elif rng.integers(2):  # no slots, but seeds or actions for one
            env.reset(np.zeros(0, np.int32), np.zeros(1, np.int64))
        else:
            env.step(np.zeros(0, np.int32), good_actions(1))

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
        kind = int(rng.integers(6))
        if kind == 5:  # no slots, but rows for one
            [model.act, model.forward, model.load][int(rng.integers(3))](
                [], np.zeros((1, model.num_params if rng.integers(2) else 5), np.float32)
            )
            return
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


# --------------------------------------------------------------------- empty index vectors

# An op case: fn(indices, k) -> its outputs, for k listed slots (0 or 1); builds its other
# per-slot inputs (seeds, actions, weights) for that k. The second item is False for a case
# that cannot run inside a tf.function (it draws with numpy).
Case = tuple[Callable[[Any, int], Any], bool]

# Empty index vectors in every form a caller may pass; "graph" is a [None]-shaped tensor
# argument of a tf.function, so the op sees k = 0 only when it runs.
EMPTY_FORMS = ("list", "numpy_int32", "numpy_int64", "tensor", "graph")


def cartpole_position(obs: Any, info: Any) -> np.ndarray:
    """An ``env.gym.behavior`` function for the gym cases: the cart's position."""
    return np.asarray(obs[:1], np.float32)


def _seeds(k: int) -> tf.Tensor:
    return tf.range(k, dtype=tf.int64) + 5


def _float_rows(k: int, *shape: int) -> tf.Tensor:
    return tf.fill([k, *shape], 0.25)


def _env_cases(env: Any, raw: str, continuous: bool) -> dict[str, Case]:
    """The cases every env shares: its Python API, and the raw reset/step/read ops."""
    spec = env.action_spec

    def actions(k: int) -> tf.Tensor:
        if spec.discrete:
            return tf.zeros([k], tf.int32)
        return _float_rows(k, *spec.shape)

    cases: dict[str, Case] = {
        "reset": (lambda i, k: env.reset(i, _seeds(k)), True),
        "step": (lambda i, k: env.step(i, actions(k)), True),
        "observation": (lambda i, k: env.observation(i), True),
        "frames": (lambda i, k: env.frames(i), True),
        "behavior": (lambda i, k: env.behavior(i), True),
    }
    if raw:
        ops = env._ops
        cases[f"raw_{raw}_reset"] = (
            lambda i, k: getattr(ops, f"neuroevo_{raw}_reset")(env.handle, i, _seeds(k)),
            True,
        )
        cases[f"raw_{raw}_step"] = (
            lambda i, k: getattr(ops, f"neuroevo_{raw}_step")(env.handle, i, actions(k)),
            True,
        )
        cases[f"raw_{raw}_frames"] = (
            lambda i, k: getattr(ops, f"neuroevo_{raw}_frames")(env.handle, i),
            True,
        )
        if continuous:
            cases[f"raw_{raw}_flags"] = (
                lambda i, k: getattr(ops, f"neuroevo_{raw}_flags")(env.handle, i),
                True,
            )
            cases[f"raw_{raw}_position"] = (
                lambda i, k: getattr(ops, f"neuroevo_{raw}_position")(env.handle, i),
                True,
            )
    if continuous:
        cases["flags"] = (lambda i, k: env.flags(i), True)
    return cases


def empty_family(family: str) -> tuple[dict[str, Case], Callable[[], list[np.ndarray]], Any]:
    """Every op of ``family`` taking slot indices as a case, a snapshot of all slots' state
    (which an empty call must leave alone) and the op library whose index-taking ops the raw
    cases must cover (None for the gymnasium adapter, which has none)."""
    every = list(range(SLOTS))
    if family == "atari":
        from neuroevo.envs.atari import AtariEnv

        env = AtariEnv("pong", SLOTS, noop_max=3)
        uber = AtariEnv("pong", 1, noop_max=3, preprocessing="uber")
        cases = _env_cases(env, "atari", continuous=False)
        ops = env._ops

        def raw_observation(target: Any, dtype: tf.DType) -> Callable[[Any, int], Any]:
            return lambda i, k: ops.neuroevo_atari_observation(
                target.handle, i, screen_size=84, stack=4, dtype=dtype
            )

        cases |= {
            "ram": (lambda i, k: env.ram(i), True),
            "lives": (lambda i, k: env.lives(i), True),
            "screen": (lambda i, k: env.screen(i), True),
            "screen_rgb": (lambda i, k: env.screen(i, rgb=True), True),
            "uber_observation": (lambda i, k: uber.observation(i), True),
            "raw_atari_observation": (raw_observation(env, tf.uint8), True),
            "raw_atari_observation_float": (raw_observation(uber, tf.float32), True),
            "raw_atari_ram": (lambda i, k: ops.neuroevo_atari_ram(env.handle, i), True),
            "raw_atari_lives": (lambda i, k: ops.neuroevo_atari_lives(env.handle, i), True),
            "raw_atari_screen": (lambda i, k: ops.neuroevo_atari_screen(env.handle, i), True),
            "raw_atari_screen_rgb": (
                lambda i, k: ops.neuroevo_atari_screen(env.handle, i, rgb=True),
                True,
            ),
        }
        uber.reset([0], [3])
    elif family == "mujoco":
        from neuroevo.envs.mujoco import MujocoEnv

        env = MujocoEnv("Hopper", SLOTS)
        cases = _env_cases(env, "mujoco", continuous=True)
        ops = env._ops
        nq, nv = env.nq, env.nv

        cases |= {
            "set_state": (
                lambda i, k: env.set_state(
                    i, tf.zeros([k, nq], tf.float64), tf.zeros([k, nv], tf.float64)
                ),
                True,
            ),
            "raw_mujoco_observation": (
                lambda i, k: ops.neuroevo_mujoco_observation(env.handle, i),
                True,
            ),
            "raw_mujoco_set_state": (
                lambda i, k: ops.neuroevo_mujoco_set_state(
                    env.handle, i, tf.zeros([k, nq], tf.float64), tf.zeros([k, nv], tf.float64)
                ),
                True,
            ),
        }
    elif family == "maze":
        from neuroevo.envs.maze import MazeEnv

        env = MazeEnv("hard", SLOTS)
        cases = _env_cases(env, "maze", continuous=True)
        ops = env._ops
        cases |= {
            "position": (lambda i, k: env.position(i), True),
            "state": (lambda i, k: env.state(i), True),
            "screen": (lambda i, k: env.screen(i), False),
            "screen_rgb": (lambda i, k: env.screen(i, rgb=True), False),
            "raw_maze_observation": (
                lambda i, k: ops.neuroevo_maze_observation(env.handle, i),
                True,
            ),
            "raw_maze_state": (lambda i, k: ops.neuroevo_maze_state(env.handle, i), True),
        }
    else:
        from neuroevo.envs.gym import GymEnv

        env = GymEnv("CartPole-v1", SLOTS, threads=2, behavior="__main__:cartpole_position")
        pendulum = GymEnv("Pendulum-v1", 2, threads=2)
        cases = _env_cases(env, "", continuous=True)
        cases |= {
            "continuous_step": (lambda i, k: pendulum.step(i, _float_rows(k, 1)), True),
            "continuous_observation": (lambda i, k: pendulum.observation(i), True),
        }
        pendulum.reset([0, 1], [1, 2])
        ops = None
    env.reset(every, list(range(SLOTS)))
    env.step(every, np.zeros((SLOTS, *env.action_spec.shape), env.action_spec.dtype.as_numpy_dtype))

    def snapshot() -> list[np.ndarray]:
        out = [env.frames(every), env.observation(every)]
        if env.provides_behavior:
            out.append(env.behavior(every))
        return [np.asarray(x) for x in out]

    return cases, snapshot, ops


def empty_models() -> tuple[dict[str, Case], Callable[[], list[np.ndarray]], Any]:
    """Population models (float32 and bfloat16 MLP, the Nature CNN) and the core ops."""
    from neuroevo import ops
    from neuroevo.envs.base import ActionSpec, ObservationSpec
    from neuroevo.models import make_model

    rng = np.random.default_rng(3)
    models = {
        "mlp": make_model(
            "mlp",
            SLOTS,
            ObservationSpec((5,), tf.float32),
            ActionSpec(discrete=True, num_actions=3),
            hidden_sizes=[8],
        ),
        "mlp_bfloat16": make_model(
            "mlp",
            SLOTS,
            ObservationSpec((5,), tf.float32),
            ActionSpec(discrete=False, shape=(2,), low=-np.ones(2), high=np.ones(2)),
            hidden_sizes=[8],
            dtype="bfloat16",
            observation_normalization=True,
        ),
        "nature_small": make_model(
            "nature_small",
            SLOTS,
            ObservationSpec((84, 84, 4), tf.uint8),
            ActionSpec(discrete=True, num_actions=6),
        ),
    }
    cases: dict[str, Case] = {}
    for model in models.values():
        flat = 0.1 * rng.standard_normal((SLOTS, model.num_params))
        model.load(list(range(SLOTS)), flat.astype(np.float32))

    def obs(model_name: str, k: int) -> tf.Tensor:
        if model_name == "nature_small":
            return tf.ones([k, 84, 84, 4], tf.uint8)
        return _float_rows(k, 5)

    def bind(name: str, model: Any) -> None:
        cases[f"{name}_forward"] = (lambda i, k: model.forward(i, obs(name, k)), True)
        cases[f"{name}_act"] = (lambda i, k: model.act(i, obs(name, k)), True)
        cases[f"{name}_read"] = (lambda i, k: model.read(i), True)
        cases[f"{name}_load"] = (
            lambda i, k: model.load(i, tf.fill([k, model.num_params], 0.5)),
            True,
        )

    for name, model in models.items():
        bind(name, model)

    core = ops.load("core")
    testing = ops.load("core_testing")
    weights = tf.Variable(rng.standard_normal((SLOTS, 3, 5)).astype(np.float32))
    weights_bf16 = tf.Variable(tf.cast(weights, tf.bfloat16))
    bias = tf.Variable(rng.standard_normal((SLOTS, 3)).astype(np.float32))
    kernel = tf.Variable(rng.standard_normal((SLOTS, 3, 3, 2, 4)).astype(np.float32))
    conv_bias = tf.Variable(rng.standard_normal((SLOTS, 4)).astype(np.float32))

    def matmul(w: tf.Variable, fused: bool, m: int | None) -> Callable[[Any, int], Any]:
        rows = [m] if m else []
        return lambda i, k: core.neuroevo_resource_indexed_matmul(
            _float_rows(k, *rows, 5),
            w.handle,
            i,
            bias=[bias.handle] if fused else [],
            dtype=w.dtype,
            activation="relu" if fused else "linear",
        )

    def conv(x_dtype: tf.DType, fused: bool, m: int | None) -> Callable[[Any, int], Any]:
        rows = [m] if m else []
        return lambda i, k: core.neuroevo_resource_indexed_conv2d(
            tf.ones([k, *rows, 7, 7, 2], x_dtype),
            kernel.handle,
            i,
            bias=[conv_bias.handle] if fused else [],
            dtype=tf.float32,
            stride=2,
            activation="relu" if fused else "linear",
        )

    cases |= {
        "raw_resource_indexed_matmul": (matmul(weights, False, None), True),
        "raw_resource_indexed_matmul_fused": (matmul(weights, True, None), True),
        "raw_resource_indexed_matmul_bfloat16": (matmul(weights_bf16, False, None), True),
        "raw_resource_indexed_matmul_per_slot_rows": (matmul(weights, True, 3), True),
        "raw_resource_indexed_conv2d": (conv(tf.float32, False, None), True),
        "raw_resource_indexed_conv2d_uint8_fused": (conv(tf.uint8, True, None), True),
        "raw_resource_indexed_conv2d_per_slot_rows": (conv(tf.float32, False, 2), True),
        "raw_indexed_matmul": (
            lambda i, k: testing.neuroevo_indexed_matmul(_float_rows(k, 5), weights, i),
            True,
        ),
    }

    def snapshot() -> list[np.ndarray]:
        every = list(range(SLOTS))
        out = [model.read(every) for model in models.values()]
        return [np.asarray(x) for x in out]

    return cases, snapshot, core


def _outputs(value: Any) -> list[np.ndarray]:
    """An op's outputs as arrays; nothing for a reset or load (None or an Operation)."""
    if value is None or isinstance(value, tf.Operation):
        return []
    if isinstance(value, tuple | list):
        return [y for x in value for y in _outputs(x)]
    return [np.asarray(value)]


def _empty_indices(form: str) -> Any:
    return {
        "list": [],
        "numpy_int32": np.zeros(0, np.int32),
        "numpy_int64": np.zeros(0, np.int64),
        "tensor": tf.zeros([0], tf.int32),
        "graph": tf.zeros([0], tf.int32),
    }[form]


def check_empty_case(case: Case, snapshot: Callable[[], list[np.ndarray]]) -> str:
    """ "ok", or what went wrong: every empty form must give outputs shaped like a one-slot
    call's with 0 rows, of the same dtypes, and leave every slot as it was."""
    fn, graph_ok = case
    try:
        reference = _outputs(fn(tf.constant([0], tf.int32), 1))
    except Exception as exc:
        return f"the one-slot reference call failed: {type(exc).__name__}: {exc}"

    def graph_body(indices: tf.Tensor) -> list[tf.Tensor]:
        outputs = tf.nest.flatten(fn(indices, 0))
        return [x for x in outputs if isinstance(x, tf.Tensor)]  # a reset returns an Operation

    graph_fn = tf.function(
        graph_body, input_signature=[tf.TensorSpec([None], tf.int32)], autograph=False
    )
    problems = []
    for form in EMPTY_FORMS:
        if form == "graph" and not graph_ok:
            continue
        before = snapshot()
        try:
            if form == "graph":
                got = _outputs(graph_fn(_empty_indices(form)))
            else:
                got = _outputs(fn(_empty_indices(form), 0))
        except Exception as exc:
            problems.append(f"{form}: {type(exc).__name__}: {str(exc).strip()[:300]}")
            continue
        want = [((0, *r.shape[1:]), r.dtype) for r in reference]
        have = [(x.shape, x.dtype) for x in got]
        if have != want:
            problems.append(f"{form}: outputs {have}, expected {want}")
        if not same(before, snapshot()):
            problems.append(f"{form}: an empty call changed a slot's state")
    return "ok" if not problems else "; ".join(problems)


def index_ops(library: Any) -> list[str]:
    """Snake-case names of the library's ops that take an ``indices`` input."""
    from tensorflow.python.framework import op_def_registry

    snake = {
        name.replace("_", ""): name
        for name in dir(library)
        if name.startswith("neuroevo_") and not name.endswith("_eager_fallback")
    }
    names = []
    for name in dir(library):
        op = op_def_registry.get(name) if name.startswith("Neuroevo") else None
        if op is not None and any(arg.name == "indices" for arg in op.input_arg):
            names.append(snake[name.lower()])
    return sorted(names)


def main_empty(family: str, start: int) -> None:
    """Runs the empty-index cases of ``family`` from the ``start``-th on, one JSON line each.

    A ``{"begin": name}`` line precedes each case, so a crash is pinned on the case that
    caused it and the caller can rerun from the next one. The first line lists every case
    and the library's index-taking ops that no raw case calls.
    """
    if family == "models":
        cases, snapshot, library = empty_models()
    else:
        cases, snapshot, library = empty_family(family)
    missing = []
    if library is not None:
        covered = "\n".join(cases)
        missing = [
            op for op in index_ops(library) if f"raw_{op[len('neuroevo_') :]}" not in covered
        ]
    print(json.dumps({"cases": list(cases), "uncovered_ops": missing}), flush=True)
    for name in list(cases)[start:]:
        print(json.dumps({"begin": name}), flush=True)
        print(
            json.dumps({"case": name, "result": check_empty_case(cases[name], snapshot)}),
            flush=True,
        )


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
    if sys.argv[1] == "empty":
        main_empty(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    else:
        main(sys.argv[1], int(sys.argv[2]))
