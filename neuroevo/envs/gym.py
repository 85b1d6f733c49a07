"""Any gymnasium env behind the batched-env API (slower than the C++ ops, but general).

``GymEnv`` holds one gymnasium instance per slot and steps the listed slots on a small thread
pool. The instances come from a registered id (``gymnasium.make``), from a factory (any
callable returning a ``gymnasium.Env``: your own env class, a wrapped env), or from a
gymnasium ``VectorEnv`` (its sub-envs: a ``SyncVectorEnv``'s instances, or a vector env's
``env_fns`` called in this process, since slots are stepped one by one, never all at once).
Its ``reset``/``step``/``observation``/``frames`` are ``tf.numpy_function`` calls, so an
evaluator's ``tf.function`` drives it exactly like the C++ ops. Physics engines that release
the GIL (MuJoCo, Box2D's C core in part) gain from the threads; pure-Python envs (CartPole) do
not, and the adapter makes no attempt to hide that.

Spaces: ``Discrete`` and ``Box`` actions; ``Box`` observations keep their shape, any other
observation space is flattened with ``gymnasium.spaces.flatten`` (``Discrete`` becomes one-hot).
Observations are float32. Box actions are clipped to the space; a NaN in a slot's action ends
that slot's episode (terminated, reward 0, flag ``NAN_ACTION``) without calling the env, as the
MuJoCo op does.

A behaviour characterisation for novelty search comes from a user function (option
``behavior: "module:function"``), called as ``function(observation, info)`` on each slot's
latest raw observation and info and returning a fixed-length float vector.
"""

from __future__ import annotations

import concurrent.futures
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import gymnasium
import numpy as np
import tensorflow as tf

from neuroevo.core.indices import (
    check_indices,
    check_num_slots,
    float_tensor,
    int_tensor,
    seed_tensor,
)
from neuroevo.envs import partial_observation
from neuroevo.envs.base import (
    ActionSpec,
    BatchedEnv,
    CallbackError,
    EnvClosedError,
    ObservationSpec,
    StepResult,
)
from neuroevo.envs.params import GymParams

__all__ = ["NAN_ACTION", "GymEnv", "GymParams"]

NAN_ACTION = 2  # same bit as the MuJoCo op's flag

BEHAVIOR_PROBE_STEPS = 50
"""Steps of the probe episode that checks ``env.gym.behavior`` when the env is made."""

partial_observation.register()  # neuroevo's own gymnasium ids, usable in configs


def _make(
    env_id: str, max_episode_steps: int | None, make_kwargs: Mapping[str, Any]
) -> gymnasium.Env:
    """``gymnasium.make``, with any error it raises (an unknown id, a module of an id
    ``module:Name-v0`` that does not import, arguments the env rejects, a missing dependency)
    turned into a ``ValueError`` naming the id and the arguments."""
    try:
        return gymnasium.make(env_id, max_episode_steps=max_episode_steps, **make_kwargs)
    except Exception as exc:  # gymnasium's, or the env's own code
        given = f" with make_kwargs {dict(make_kwargs)}" if make_kwargs else ""
        raise ValueError(
            f"gymnasium cannot make '{env_id}'{given}: {type(exc).__name__}: {exc} (the "
            "registered ids are the keys of gymnasium.registry; make_kwargs are the env's "
            "constructor arguments)"
        ) from None


def _observation_spec(space: gymnasium.Space) -> ObservationSpec:
    if isinstance(space, gymnasium.spaces.Box):
        return ObservationSpec(tuple(space.shape), tf.float32)
    flat = gymnasium.spaces.flatten_space(space)
    return ObservationSpec(tuple(flat.shape), tf.float32)


def _action_spec(space: gymnasium.Space, env_id: str) -> ActionSpec:
    if isinstance(space, gymnasium.spaces.Discrete):
        return ActionSpec(discrete=True, num_actions=int(space.n))
    if isinstance(space, gymnasium.spaces.Box):
        return ActionSpec(
            discrete=False,
            shape=tuple(space.shape),
            low=space.low.astype(np.float32),
            high=space.high.astype(np.float32),
        )
    raise ValueError(
        f"{env_id} has a {type(space).__name__} action space; GymEnv supports Discrete and Box"
    )


def load_behavior_function(path: str) -> Callable[[Any, Any], Any]:
    """Imports ``"module:function"``; a ValueError names what is missing."""
    module_name, _, name = path.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"env.gym.behavior: cannot load '{path}': {exc}") from None
    if not callable(function):
        raise ValueError(f"env.gym.behavior: '{path}' is not a function")
    return function


EnvSource = str | Callable[[], gymnasium.Env] | gymnasium.vector.VectorEnv
"""What a ``GymEnv`` is made from: a registered id, a factory, or a vector env."""


def _from_factory(
    factory: Callable[[], Any], max_episode_steps: int | None, what: str
) -> gymnasium.Env:
    env = factory()
    if not isinstance(env, gymnasium.Env):
        raise TypeError(f"{what} returned {type(env).__name__}, not a gymnasium.Env")
    if max_episode_steps is not None:
        env = gymnasium.wrappers.TimeLimit(env, max_episode_steps)
    return env


def _instances(
    source: EnvSource,
    num_slots: int | None,
    max_episode_steps: int | None,
    make_kwargs: Mapping[str, Any],
) -> list[gymnasium.Env]:
    """One env per slot from ``source`` (see :class:`GymEnv`)."""
    if isinstance(source, str):
        if num_slots is None:
            raise ValueError("num_slots is required with an env id")
        return [_make(source, max_episode_steps, make_kwargs) for _ in range(num_slots)]
    if make_kwargs:
        raise ValueError(
            "make_kwargs are arguments of gymnasium.make and need a registered id; pass them to "
            "your factory instead"
        )
    if isinstance(source, gymnasium.vector.VectorEnv):
        if num_slots not in (None, source.num_envs):
            raise ValueError(
                f"num_slots={num_slots} but the vector env has {source.num_envs} envs; pass "
                "num_slots=None"
            )
        if isinstance(source, gymnasium.vector.SyncVectorEnv):
            envs = list(source.envs)
            if max_episode_steps is not None:
                envs = [gymnasium.wrappers.TimeLimit(env, max_episode_steps) for env in envs]
            return envs
        fns = getattr(source, "env_fns", None)
        if fns is None:
            raise TypeError(
                f"{type(source).__name__} exposes neither its envs nor its env_fns; pass a "
                "factory instead"
            )
        return [_from_factory(fn, max_episode_steps, "the vector env's env_fns") for fn in fns]
    if callable(source):
        if num_slots is None:
            raise ValueError("num_slots is required with an env factory")
        return [
            _from_factory(source, max_episode_steps, "the env factory") for _ in range(num_slots)
        ]
    raise TypeError(
        f"GymEnv needs an env id, a factory returning a gymnasium.Env or a gymnasium VectorEnv, "
        f"got {type(source).__name__}"
    )


def _describe(source: EnvSource) -> str:
    if isinstance(source, str):
        return source
    return getattr(source, "__qualname__", None) or type(source).__name__


class GymEnv(BatchedEnv):
    """``num_slots`` instances of one gymnasium env, stepped from a thread pool.

    Args:
        env: any id ``gymnasium.make`` accepts (``"CartPole-v1"``, ``"Pendulum-v1"``), a
            factory called once per slot (``lambda: MyEnv(size=5)``; for Ray runs it must
            pickle: a module-level function or ``functools.partial``), or a gymnasium
            ``VectorEnv`` (one slot per sub-env; see the module docstring).
        num_slots: number of independent instances (None with a vector env: its count).
        max_episode_steps: episode cutoff (truncation); None keeps the id's registered limit
            (a factory's env: none beyond its own).
        **options: the fields of :class:`GymParams` (``make_kwargs`` only with an id).

    Raises:
        ValueError: bad ``num_slots``/``threads``, an unsupported action space, or an id or
            arguments ``gymnasium.make`` rejects (an unknown id, a missing dependency).
        TypeError: ``env`` is none of the above, or a factory returns something else.
    """

    params_class = GymParams

    def __init__(
        self,
        env: EnvSource,
        num_slots: int | None = None,
        *,
        max_episode_steps: int | None = None,
        **options: Any,
    ) -> None:
        if num_slots is not None:
            check_num_slots(num_slots)
        self.options = GymParams(**options)
        threads = self.options.threads
        env_id = _describe(env)
        self.env_id = env_id
        self._envs = _instances(env, num_slots, max_episode_steps, self.options.make_kwargs)
        spec = self._envs[0].spec
        # How messages name the env: its id, else its class (a factory is a lambda, often).
        self._name = spec.id if spec is not None else type(self._envs[0].unwrapped).__name__
        num_slots = self.num_slots = check_num_slots(len(self._envs))
        self._obs_space = self._envs[0].observation_space
        self._act_space = self._envs[0].action_space
        self.observation_spec = _observation_spec(self._obs_space)
        self.action_spec = _action_spec(self._act_space, env_id)
        self._obs = np.zeros((num_slots, *self.observation_spec.shape), np.float32)
        self._frames = np.zeros(num_slots, np.int64)
        self._flags = np.zeros(num_slots, np.int32)
        self._over = np.ones(num_slots, bool)  # no episode before the first reset
        self._behavior_fn = None
        self._behavior_size = 0
        self._latest: list[tuple[Any, Any]] = [(None, {})] * num_slots  # raw obs, info
        if self.options.behavior is not None:
            self._behavior_fn = load_behavior_function(self.options.behavior)
        self._probe()
        self._closed = False
        self._threads = threads
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="gym-env")
            if threads > 1
            else None
        )

    # ------------------------------------------------------------------------------- TF API

    def reset(self, indices: tf.Tensor, seeds: tf.Tensor) -> None:
        _numpy_call(self._reset, [self._indices(indices), seed_tensor(seeds)], [])

    def step(self, indices: tf.Tensor, actions: tf.Tensor) -> StepResult:
        indices = self._indices(indices)
        if self.action_spec.discrete:
            actions = int_tensor(actions, tf.int32, "actions")
        else:
            actions = float_tensor(actions, "actions")
        outputs = _numpy_call(self._step, [indices, actions], [tf.float32, tf.bool, tf.bool])
        for t in outputs:
            t.set_shape(indices.shape)
        return StepResult(*outputs)

    def observation(self, indices: tf.Tensor) -> tf.Tensor:
        indices = self._indices(indices)
        (obs,) = _numpy_call(self._observation, [indices], [tf.float32])
        obs.set_shape(indices.shape.concatenate(self.observation_spec.shape))
        return obs

    def frames(self, indices: tf.Tensor) -> tf.Tensor:
        indices = self._indices(indices)
        (frames,) = _numpy_call(lambda i: self._frames[self._check(i)], [indices], [tf.int64])
        frames.set_shape(indices.shape)
        return frames

    def flags(self, indices: tf.Tensor) -> tf.Tensor:
        """int32 ``[k]``: ``NAN_ACTION`` if the slot's current episode ended on a NaN action."""
        indices = self._indices(indices)
        (flags,) = _numpy_call(lambda i: self._flags[self._check(i)], [indices], [tf.int32])
        flags.set_shape(indices.shape)
        return flags

    def behavior(self, indices: tf.Tensor) -> tf.Tensor | None:
        """float32 ``[k, d]``: the ``env.gym.behavior`` function of each slot's latest raw
        observation and info; None when that option is not set."""
        if self._behavior_fn is None:
            return None
        indices = self._indices(indices)
        (rows,) = _numpy_call(self._behaviors, [indices], [tf.float32])
        rows.set_shape(indices.shape.concatenate([self._behavior_size]))
        return rows

    @property
    def provides_behavior(self) -> bool:
        return self._behavior_fn is not None

    def close(self) -> None:
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for env in self._envs:
            env.close()

    def _indices(self, indices: object) -> tf.Tensor:
        if self._closed:
            raise EnvClosedError(self)
        return super()._indices(indices)

    def __repr__(self) -> str:
        return f"GymEnv({self.env_id!r}, num_slots={self.num_slots})"

    # ------------------------------------------------------------------ numpy implementations

    def _check(self, indices: np.ndarray) -> np.ndarray:
        """The listed slots, checked as the C++ ops check theirs; the env must be open."""
        if self._closed:
            raise EnvClosedError(self)
        return check_indices(indices, self.num_slots)

    def _run(self, work: Callable[[int, int], None], indices: np.ndarray) -> None:
        """Calls ``work(row, slot)`` for every listed slot, split over the worker threads."""
        if self._pool is None or indices.size < 2:
            for row, slot in enumerate(indices):
                work(row, int(slot))
            return
        chunks = np.array_split(np.arange(indices.size), min(self._threads, indices.size))

        def run_chunk(rows: Sequence[int]) -> None:
            for row in rows:
                work(int(row), int(indices[row]))

        for future in [self._pool.submit(run_chunk, rows) for rows in chunks]:
            future.result()

    def _store(self, slot: int, obs: Any) -> None:
        try:
            if isinstance(self._obs_space, gymnasium.spaces.Box):
                obs = np.asarray(obs, np.float32).reshape(self.observation_spec.shape)
            else:
                obs = gymnasium.spaces.flatten(self._obs_space, obs)
            self._obs[slot] = obs
        except (ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
            raise ValueError(
                f"{self._name} (slot {slot}) returned an observation that does not fit its "
                f"observation space {self._obs_space} ({_shape_of(obs)}: {exc}); the env must "
                "return observations of the space it declares"
            ) from None

    def _probe(self) -> None:
        """Runs a probe episode on slot 0 (seeded random actions: one step, or up to
        ``BEHAVIOR_PROBE_STEPS`` with a behaviour function), so that an env that fails to
        reset or step (a missing renderer, say), returns observations outside its space, or a
        behaviour function that raises or changes length is refused when the env is made,
        before any run starts; the slot is reset before it is used."""
        env = self._envs[0]
        try:
            obs, info = env.reset(seed=0)
        except Exception as exc:  # the env's own code
            raise self._probe_error("reset", exc) from None
        self._store(0, obs)
        if self._behavior_fn is not None:
            self._behavior_size = self._behavior_row(obs, info, "after reset").size
        env.action_space.seed(0)
        steps = 1 if self._behavior_fn is None else BEHAVIOR_PROBE_STEPS
        for step in range(1, steps + 1):
            try:
                obs, _, terminated, truncated, info = env.step(env.action_space.sample())
            except Exception as exc:
                raise self._probe_error("step", exc) from None
            self._store(0, obs)
            if self._behavior_fn is not None:
                self._behavior_row(obs, info, f"at step {step} of a probe episode")
            if terminated or truncated:
                break

    def _probe_error(self, call: str, exc: Exception) -> ValueError:
        return ValueError(
            f"gymnasium env '{self._name}' fails on its first {call} (a probe before any run "
            f"starts): {type(exc).__name__}: {exc}"
        )

    def _behavior_row(self, obs: Any, info: Any, when: str = "during an episode") -> np.ndarray:
        path = self.options.behavior
        try:
            row = np.asarray(self._behavior_fn(obs, info), np.float32).ravel()
        except Exception as exc:  # the user's code: report it as theirs, in one line
            self._fail(f"env.gym.behavior '{path}' raised {type(exc).__name__}: {exc} ({when})")
        if self._behavior_size and row.size != self._behavior_size:
            self._fail(
                f"env.gym.behavior '{path}' returned {row.size} values {when}, earlier "
                f"{self._behavior_size}; a behaviour characterisation must have a fixed length"
            )
        if row.size == 0:
            self._fail(f"env.gym.behavior '{path}' returned no values ({when})")
        return row

    def _fail(self, message: str) -> NoReturn:
        """Raises the behaviour function's failure and keeps it for ``callback_error`` (the
        op that called it reports only a TensorFlow error)."""
        self.callback_error = CallbackError(message)
        raise self.callback_error

    def _behaviors(self, indices: np.ndarray) -> np.ndarray:
        rows = [self._behavior_row(*self._latest[slot]) for slot in self._check(indices)]
        return np.stack(rows) if rows else np.zeros((0, self._behavior_size), np.float32)

    def _reset(self, indices: np.ndarray, seeds: np.ndarray) -> None:
        self._check(indices)
        if seeds.shape != indices.shape:
            raise ValueError(f"seeds shape {seeds.shape} != indices shape {indices.shape}")

        def work(row: int, slot: int) -> None:
            # gymnasium wants a non-negative seed: reinterpret int64 as uint64.
            obs, info = self._envs[slot].reset(seed=int(seeds[row]) % 2**64)
            self._latest[slot] = (obs, info)
            self._store(slot, obs)
            self._frames[slot] = 0
            self._flags[slot] = 0
            self._over[slot] = False

        self._run(work, indices)

    def _step(
        self, indices: np.ndarray, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self._check(indices)
        spec = self.action_spec
        expected = (indices.size,) if spec.discrete else (indices.size, *spec.shape)
        if actions.shape != expected:
            raise ValueError(f"actions must have shape {expected}, got {actions.shape}")
        if spec.discrete:
            bad = actions[(actions < 0) | (actions >= spec.num_actions)]
            if bad.size:
                raise ValueError(f"action {bad[0]} out of range [0, {spec.num_actions})")
        over = indices[self._over[indices]]
        if over.size:
            raise ValueError(f"slot {over[0]} has no running episode; reset it first")
        reward = np.zeros(indices.size, np.float32)
        terminated = np.zeros(indices.size, bool)
        truncated = np.zeros(indices.size, bool)

        def work(row: int, slot: int) -> None:
            self._frames[slot] += 1
            if spec.discrete:
                action: Any = int(actions[row]) + int(self._act_space.start)
            elif np.isnan(actions[row]).any():
                self._flags[slot] |= NAN_ACTION
                terminated[row] = True
                self._over[slot] = True
                return
            else:
                action = np.clip(actions[row], spec.low, spec.high).astype(self._act_space.dtype)
            obs, r, term, trunc, info = self._envs[slot].step(action)
            self._latest[slot] = (obs, info)
            self._store(slot, obs)
            reward[row], terminated[row], truncated[row] = r, term, trunc
            self._over[slot] = term or trunc

        self._run(work, indices)
        return reward, terminated, truncated

    def _observation(self, indices: np.ndarray) -> np.ndarray:
        return self._obs[self._check(indices)]


def _shape_of(value: Any) -> str:
    """What an env returned, shortly (for messages)."""
    try:
        return f"{type(value).__name__} of shape {np.shape(value)}"
    except ValueError:  # ragged
        return type(value).__name__


def _numpy_call(
    func: Callable[..., Any], inputs: list[tf.Tensor], out_types: list[tf.DType]
) -> list[tf.Tensor]:
    """``tf.numpy_function`` whose ``ValueError`` is an ``InvalidArgumentError`` in both modes.

    In a graph TF already maps ``ValueError`` to ``InvalidArgumentError``; eagerly it re-raises
    the Python exception, so we translate it to keep one error type across backends.
    """
    try:
        outputs = tf.numpy_function(func, inputs, out_types, stateful=True)
    except ValueError as exc:
        if not tf.executing_eagerly() or isinstance(exc, tf.errors.InvalidArgumentError):
            raise
        raise tf.errors.InvalidArgumentError(None, None, str(exc)) from exc
    return outputs if isinstance(outputs, list) else [outputs]
