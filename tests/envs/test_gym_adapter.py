"""The gymnasium adapter behind the batched-env API: specs, seeding, graph use, bad input."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import tensorflow as tf

from neuroevo.envs.gym import NAN_ACTION, GymEnv


@pytest.fixture(params=[1, 2], ids=["inline", "threads"])
def threads(request) -> int:
    return request.param


def _reference_rollout(env_id: str, seed: int, actions: list) -> list[tuple]:
    env = gymnasium.make(env_id)
    obs, _ = env.reset(seed=seed)
    out = [(obs, 0.0, False, False)]
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        out.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    return out


def test_discrete_env_matches_gymnasium(threads):
    env = GymEnv("CartPole-v1", 3, threads=threads)
    assert env.observation_spec.shape == (4,) and env.observation_spec.dtype == tf.float32
    assert env.action_spec.discrete and env.action_spec.num_actions == 2
    actions = [1, 0, 1, 1, 0, 0, 1, 0] * 4
    reference = _reference_rollout("CartPole-v1", 11, actions)
    env.reset([2, 0], [11, 12])
    np.testing.assert_allclose(env.observation([2]).numpy()[0], reference[0][0], rtol=1e-6)
    running = [2, 0]  # slot 0 runs alongside with another seed until its episode ends
    for t, (obs, reward, terminated, truncated) in enumerate(reference[1:]):
        result = env.step(running, [actions[t]] * len(running))
        np.testing.assert_allclose(env.observation([2]).numpy()[0], obs, rtol=1e-6)
        assert result.reward.numpy()[0] == reward
        assert (bool(result.terminated[0]), bool(result.truncated[0])) == (terminated, truncated)
        if len(running) == 2 and (result.terminated[1] or result.truncated[1]):
            running = [2]
    assert env.frames([2]).numpy()[0] == len(reference) - 1
    env.close()


def test_continuous_env_clips_actions_and_rejects_nan(threads):
    env = GymEnv("Pendulum-v1", 3, threads=threads)
    assert not env.action_spec.discrete and env.action_spec.shape == (1,)
    np.testing.assert_array_equal(env.action_spec.high, [2.0])
    env.reset([0, 1, 2], [4, 4, 4])
    result = env.step([0, 1, 2], np.array([[np.nan], [50.0], [2.0]], np.float32))
    assert result.terminated.numpy().tolist() == [True, False, False]
    assert result.reward.numpy()[0] == 0.0
    assert env.flags([0, 1, 2]).numpy().tolist() == [NAN_ACTION, 0, 0]
    np.testing.assert_array_equal(env.observation([1]), env.observation([2]))
    env.close()


def test_same_seed_same_episode_and_truncation():
    env = GymEnv("Pendulum-v1", 2, max_episode_steps=3, threads=1)
    env.reset([0, 1], [7, 7])
    np.testing.assert_array_equal(*env.observation([0, 1]).numpy())
    for _ in range(3):
        result = env.step([0, 1], np.zeros((2, 1), np.float32))
    assert result.truncated.numpy().tolist() == [True, True]
    with pytest.raises(tf.errors.InvalidArgumentError, match="no running episode"):
        env.step([0], np.zeros((1, 1), np.float32))


def test_inside_tf_function_with_static_shapes():
    env = GymEnv("CartPole-v1", 4)

    @tf.function(autograph=False)
    def start_and_step(indices, seeds):
        env.reset(indices, seeds)
        obs = env.observation(indices)
        with tf.control_dependencies([obs]):
            result = env.step(indices, tf.zeros_like(indices))
        return obs, result, env.frames(indices)

    obs, result, frames = start_and_step(tf.constant([3, 0]), tf.constant([1, 2], tf.int64))
    assert obs.shape == (2, 4) and result.reward.shape == (2,)
    assert frames.numpy().tolist() == [1, 1]
    spec = tf.TensorSpec([None], tf.int32)
    traced = tf.function(env.observation).get_concrete_function(spec)
    assert traced.structured_outputs.shape.as_list() == [None, 4]


@pytest.mark.parametrize(
    ("indices", "actions", "message"),
    [
        ([0, 4], [0, 0], r"indices\[1\] = 4 is out of range: there are 4 slots \[0, 4\)"),
        ([1, 1], [0, 0], r"indices\[1\] = 1 duplicates indices\[0\]"),
        ([0], [2], r"action 2 out of range \[0, 2\)"),
        ([0, 1], [0], r"actions must have shape \(2,\)"),
    ],
)
def test_bad_input_is_invalid_argument_eagerly_and_in_graphs(indices, actions, message):
    env = GymEnv("CartPole-v1", 4, threads=1)
    env.reset([0, 1, 2, 3], [0, 1, 2, 3])
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        env.step(indices, actions)
    step = tf.function(env.step, autograph=False)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        step(tf.constant(indices), tf.constant(actions))


def test_non_box_observations_are_flattened():
    env = GymEnv("FrozenLake-v1", 2, threads=1)
    assert env.observation_spec.shape == (16,)
    env.reset([0, 1], [0, 1])
    np.testing.assert_array_equal(env.observation([0]).numpy()[0], np.eye(16)[0])


def test_unsupported_action_space_is_named():
    gymnasium.register("neuroevo-test/Tuple-v0", entry_point=_TupleActionEnv)
    with pytest.raises(ValueError, match="Tuple action space; GymEnv supports Discrete and Box"):
        GymEnv("neuroevo-test/Tuple-v0", 1)


class _TupleActionEnv(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,))
    action_space = gymnasium.spaces.Tuple((gymnasium.spaces.Discrete(2),) * 2)


@pytest.mark.parametrize(
    ("algorithm", "hyperparams"),
    [
        ("ga", {"population_size": 8, "truncation": 3, "validation_candidates": 2}),
        ("es", {"population_size": 8}),
    ],
)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_one_generation_through_the_evaluator(algorithm, hyperparams, env_id):
    from neuroevo.algorithms import make_algorithm
    from neuroevo.evaluation import Evaluator
    from neuroevo.genomes.noise import NoiseTable
    from neuroevo.models import make_model

    env = GymEnv(env_id, 6, max_episode_steps=50)
    model = make_model(
        "mlp", env.num_slots, env.observation_spec, env.action_spec, hidden_sizes=(8,)
    )
    optimizer = make_algorithm(
        algorithm,
        num_params=model.num_params,
        scales=model.init_scales(),
        noise=NoiseTable(seed=0, size=100_000, cache_dir=False),
        **hyperparams,
    )
    summary = None
    with Evaluator(env, model, optimizer.decoder.decode_batch, workers=2) as evaluator:
        while summary is None:  # a generation may take several phases (GA validation)
            request = optimizer.ask()
            results = evaluator.evaluate(request)
            assert np.all((results.lengths >= 1) & (results.lengths <= 50))
            summary = optimizer.tell(request, results)
    env.close()
    assert summary.generation == 0 and summary.nan_count == 0
    assert np.isfinite(summary.best)


def _episode(env: GymEnv, slot: int, seed: int, actions: list) -> list:
    env.reset([slot], [seed])
    rows = [env.observation([slot]).numpy()[0]]
    for action in actions:
        reward, terminated, truncated = env.step([slot], [action])
        rows.append((env.observation([slot]).numpy()[0], float(reward[0]), bool(terminated[0])))
        if terminated[0] or truncated[0]:
            break
    return rows


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x[0] if isinstance(x, tuple) else x, y[0] if isinstance(y, tuple) else y)
        and (not isinstance(x, tuple) or x[1:] == y[1:])
        for x, y in zip(a, b, strict=True)
    )


def test_a_factory_or_a_vector_env_gives_the_ids_episodes() -> None:
    seed = 21
    actions = list(np.random.default_rng(seed).integers(0, 2, 40))
    by_id = GymEnv("CartPole-v1", 2, threads=1)
    expected = _episode(by_id, 1, seed, actions)
    factory = GymEnv(lambda: gymnasium.make("CartPole-v1"), 2, threads=1)
    assert factory.num_slots == 2 and factory.action_spec == by_id.action_spec
    assert _same(_episode(factory, 1, seed, actions), expected), f"seed {seed}"
    for vector in (
        gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 3),
        gymnasium.vector.AsyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 3),
    ):
        env = GymEnv(vector, threads=1)
        assert env.num_slots == 3
        assert _same(_episode(env, 2, seed, actions), expected), type(vector).__name__
        vector.close()


def test_a_factory_env_gets_the_cutoff_and_the_config_passes_make_kwargs() -> None:
    from neuroevo.config.schema import load_config
    from neuroevo.run.build import build_env

    env = GymEnv(lambda: gymnasium.make("CartPole-v1").unwrapped, 1, max_episode_steps=3)
    env.reset([0], [0])
    ends = [bool(env.step([0], [0])[2][0]) for _ in range(3)]
    assert ends == [False, False, True]  # truncated at the third step
    cfg = load_config(
        None,
        [
            "budget.generations=1",
            "env.kind=gym",
            "env.id=CartPole-v1",
            "env.gym.make_kwargs={sutton_barto_reward: true}",
            "model.name=mlp",
        ],
    )
    assert cfg.env.options.make_kwargs == {"sutton_barto_reward": True}
    env = build_env(cfg, 1)
    env.reset([0], [0])
    assert float(env.step([0], [0])[0][0]) == 0.0  # Sutton & Barto's reward: 0 per step


@pytest.mark.parametrize(
    ("make", "error", "pattern"),
    [
        (lambda: GymEnv(lambda: "nope", 1), TypeError, "returned str, not a gymnasium.Env"),
        (lambda: GymEnv(42, 1), TypeError, "needs an env id, a factory .* got int"),
        (
            lambda: GymEnv(lambda: gymnasium.make("CartPole-v1"), 1, make_kwargs={"a": 1}),
            ValueError,
            "make_kwargs are arguments of gymnasium.make and need a registered id",
        ),
        (
            lambda: GymEnv(lambda: gymnasium.make("CartPole-v1")),
            ValueError,
            "num_slots is required",
        ),
        (
            lambda: GymEnv(
                gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 2), 3
            ),
            ValueError,
            "num_slots=3 but the vector env has 2 envs",
        ),
    ],
)
def test_bad_env_sources_name_the_problem(make, error, pattern) -> None:
    with pytest.raises(error, match=pattern):
        make()


def test_a_behaviour_function_is_checked_on_a_probe_episode():
    from neuroevo.envs.base import CallbackError

    with pytest.raises(CallbackError, match=r"'behavior_functions:raises' raised KeyError"):
        GymEnv("CartPole-v1", 1, behavior="behavior_functions:raises")
    with pytest.raises(CallbackError, match=r"returned 3 values at step 1 of a probe episode"):
        GymEnv("CartPole-v1", 1, behavior="behavior_functions:varying")


def test_a_behaviour_changing_length_mid_run_is_the_function_s_error():
    """Past the probe, the evaluator reports the function's own one-line error, not the
    TensorFlow error of the op that called it."""
    from neuroevo.envs.base import CallbackError
    from neuroevo.evaluation import EvalRequest, Evaluator
    from neuroevo.evaluation.behavior_params import BehaviorParams
    from neuroevo.models import make_model

    env = GymEnv("CartPole-v1", 4, max_episode_steps=50, behavior="behavior_functions:varying_late")
    model = make_model("mlp", 4, env.observation_spec, env.action_spec, hidden_sizes=(4,))
    seeds = np.arange(100, dtype=np.int64).reshape(20, 5)  # 100 behaviours read at least
    decode = lambda genomes: np.zeros((len(genomes), model.num_params), np.float32)  # noqa: E731
    with (
        Evaluator(env, model, decode, workers=2, behavior=BehaviorParams()) as evaluator,
        pytest.raises(CallbackError, match=r"returned 3 values during an episode, earlier 2"),
    ):
        evaluator.evaluate(EvalRequest(list(range(20)), seeds))
    env.close()


def test_per_episode_data_of_changing_shape_is_named():
    from neuroevo.evaluation.results import EpisodeDataError, EpisodeTable

    table = EpisodeTable(2, 1)
    table.record(np.array([0]), np.array([0]), behavior=np.zeros((1, 2), np.float32))
    with pytest.raises(EpisodeDataError, match=r"per-episode behavior has shape \[3\] but "):
        table.record(np.array([1]), np.array([0]), behavior=np.zeros((1, 3), np.float32))


class _Observes(gymnasium.Env):
    """An env whose observations need not fit the Box it declares."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, size: int = 3, fail_on: str = ""):
        self.size, self.fail_on = size, fail_on

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.fail_on == "reset":
            raise ImportError("pygame is not installed")
        return np.zeros(self.size, np.float32), {}

    def step(self, action):
        if self.fail_on == "step":
            raise RuntimeError("the simulator crashed")
        return np.zeros(self.size, np.float32), 1.0, False, False, {}


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (
            lambda: GymEnv("nosuchmodule:Foo-v0", 1),
            r"gymnasium cannot make 'nosuchmodule:Foo-v0': ModuleNotFoundError: No module named "
            r"'nosuchmodule'",
        ),
        (
            lambda: GymEnv("CartPole-v1", 1, make_kwargs={"bogus": 1}),
            r"cannot make 'CartPole-v1' with make_kwargs \{'bogus': 1\}: TypeError: .*bogus",
        ),
        (
            lambda: GymEnv(lambda: _Observes(fail_on="reset"), 1),
            r"env '_Observes' fails on its first reset \(a probe before any run starts\): "
            r"ImportError: pygame is not installed",
        ),
        (
            lambda: GymEnv(lambda: _Observes(fail_on="step"), 2),
            r"fails on its first step .*RuntimeError: the simulator crashed",
        ),
        (
            lambda: GymEnv(lambda: _Observes(size=5), 2),
            r"_Observes \(slot 0\) returned an observation that does not fit its observation "
            r"space Box\(-1\.0, 1\.0, \(3,\), float32\) \(ndarray of shape \(5,\): cannot reshape",
        ),
    ],
    ids=["missing-module", "bad-make-kwargs", "reset-fails", "step-fails", "observation-shape"],
)
def test_an_env_that_cannot_be_made_or_run_is_one_value_error_when_made(make, pattern) -> None:
    """Caught when the env is made (before a run directory exists), in one line naming the
    env: gymnasium's errors of any type, and a probe reset and step (a renderer that cannot
    start, observations that do not fit the declared space)."""
    with pytest.raises(ValueError, match=pattern):
        make()
