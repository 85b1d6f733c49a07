"""The Atari env op: parity with ale-py and gymnasium, determinism, bad input, concurrency.

Parity references are set up to do exactly what the op does: ``ALEInterface`` seeded with the
op's per-episode ALE seed (``episode_draws``) for raw screens, RAM and rewards; gymnasium's
``AtariPreprocessing`` + ``FrameStackObservation`` on a frameskip-1 env with the op's no-op
count for preprocessed observations. Both must match bit for bit, terminal steps included.
Episodes are short and slots few so the whole file runs in about a minute on 2 cores.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

ale_py = pytest.importorskip("ale_py")
gymnasium = pytest.importorskip("gymnasium")

from neuroevo.envs import make_env  # noqa: E402
from neuroevo.envs.atari import (  # noqa: E402
    AtariEnv,
    AtariParams,
    episode_draws,
    list_games,
    rom_path,
)
from neuroevo.envs.base import EnvClosedError, StepResult  # noqa: E402

MAKE_ATTRS = dataclasses.asdict(AtariParams()) | {"max_episode_steps": 0}
"""Every setting of the raw make op (it has no defaults of its own)."""

ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
InvalidArgument = tf.errors.InvalidArgumentError


@pytest.fixture(scope="module")
def pong() -> AtariEnv:
    return AtariEnv("pong", 4)


def random_actions(env: AtariEnv, count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, env.action_spec.num_actions, count)


# ------------------------------------------------------------------------------ references


def ale_episode(
    game: str,
    seed: int,
    actions: np.ndarray,
    *,
    frame_skip: int = 4,
    noop_max: int = 30,
    sticky: float = 0.0,
    fire_reset: bool = False,
    life_loss: bool = False,
    full_action_space: bool = False,
) -> dict[str, np.ndarray]:
    """Plays one episode on a fresh ``ALEInterface`` with the op's semantics, frame by frame."""
    ale_seed, noops = episode_draws(seed, noop_max)
    ale = ale_py.ALEInterface()
    ale.setInt("random_seed", ale_seed)
    ale.setFloat("repeat_action_probability", sticky)
    ale.loadROM(rom_path(game))
    ale.reset_game()
    action_set = ale.getLegalActionSet() if full_action_space else ale.getMinimalActionSet()
    for _ in range(noops):
        ale.act(ale_py.Action.NOOP)
        assert not ale.game_over()
    if fire_reset and ale_py.Action.FIRE in action_set:
        for _ in range(frame_skip):
            ale.act(ale_py.Action.FIRE)
    gray, rgb, ram = [ale.getScreenGrayscale()], [ale.getScreenRGB()], [ale.getRAM()]
    rewards, terminated = [], []
    lives = ale.lives()
    for a in actions:
        reward, done = 0, False
        for _ in range(frame_skip):
            reward += ale.act(action_set[a])
            done = ale.game_over(with_truncation=False)
            if life_loss:
                done = done or ale.lives() < lives
                lives = ale.lives()
            if done:
                break
        gray.append(ale.getScreenGrayscale())
        rgb.append(ale.getScreenRGB())
        ram.append(ale.getRAM())
        rewards.append(reward)
        terminated.append(done)
        if done:
            break
    return {
        "gray": np.array(gray),
        "rgb": np.array(rgb),
        "ram": np.array(ram),
        "reward": np.array(rewards, np.float32),
        "terminated": np.array(terminated),
        "frames_after_reset": np.int64(
            noops + (frame_skip if fire_reset and ale_py.Action.FIRE in action_set else 0)
        ),
    }


class _FixedNoops:
    """Stands in for the env's np_random so AtariPreprocessing draws exactly ``n`` no-ops."""

    def __init__(self, n: int) -> None:
        self.n = n

    def integers(self, low: int, high: int) -> int:
        assert low <= self.n < high
        return self.n


def gymnasium_episode(
    game: str,
    noops: int,
    actions: np.ndarray,
    *,
    life_loss: bool,
    frame_skip: int = 4,
    screen_size: int = 84,
    stack: int = 4,
) -> dict[str, np.ndarray]:
    """The same episode through AtariPreprocessing + FrameStackObservation (channels last)."""
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    base = ale_py.env.AtariEnv(game=game, frameskip=1, repeat_action_probability=0.0)
    env = FrameStackObservation(
        AtariPreprocessing(
            base,
            noop_max=max(noops, 1) if noops else 0,
            frame_skip=frame_skip,
            screen_size=screen_size,
            terminal_on_life_loss=life_loss,
        ),
        stack,
    )
    base._np_random = _FixedNoops(noops)  # a fresh env + reset() without seed: no reload
    obs, _ = env.reset()
    observations, rewards, terminated = [obs], [], []
    for a in actions:
        obs, reward, term, trunc, _ = env.step(int(a))
        observations.append(obs)
        rewards.append(reward)
        terminated.append(term)
        if term or trunc:
            break
    env.close()
    return {
        "obs": np.transpose(np.array(observations), (0, 2, 3, 1)),
        "reward": np.array(rewards, np.float32),
        "terminated": np.array(terminated),
    }


def play(env: AtariEnv, slot: int, seed: int, actions: np.ndarray, what: tuple[str, ...]) -> dict:
    """Resets ``slot`` with ``seed`` and steps it until the episode ends, recording ``what``."""
    env.reset([slot], [seed])
    record: dict[str, list] = {k: [] for k in (*what, "reward", "terminated", "truncated")}
    fetch = {
        "gray": lambda: env.screen([slot]),
        "rgb": lambda: env.screen([slot], rgb=True),
        "ram": lambda: env.ram([slot]),
        "obs": lambda: env.observation([slot]),
    }

    def snapshot() -> None:
        for k in what:
            record[k].append(fetch[k]().numpy()[0])

    snapshot()
    frames_after_reset = env.frames([slot]).numpy()[0]
    for a in actions:
        result = env.step([slot], [a])
        snapshot()
        for k, v in zip(("reward", "terminated", "truncated"), result, strict=True):
            record[k].append(v.numpy()[0])
        if record["terminated"][-1] or record["truncated"][-1]:
            break
    out = {k: np.array(v) for k, v in record.items()}
    out["frames_after_reset"] = frames_after_reset
    return out


# ----------------------------------------------------------------------------------- parity

RAW_CASES = [
    # game, env options; sticky actions check that ALE's RNG is seeded like ALEInterface's.
    ("pong", {}),
    ("breakout", {"sticky_action_prob": 0.25, "terminal_on_life_loss": True, "fire_reset": True}),
    ("frostbite", {"sticky_action_prob": 0.25}),
    ("space_invaders", {"full_action_space": True, "terminal_on_life_loss": True}),
]


@pytest.mark.parametrize(("game", "options"), RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_raw_screens_ram_and_rewards_equal_ale_interface(game: str, options: dict) -> None:
    env = AtariEnv(game, 2, **options)
    actions = random_actions(env, 300, seed=1)
    seed = 20240611
    ours = play(env, 1, seed, actions, ("gray", "rgb", "ram"))
    ref = ale_episode(
        game,
        seed,
        actions,
        sticky=options.get("sticky_action_prob", 0.0),
        fire_reset=options.get("fire_reset", False),
        life_loss=options.get("terminal_on_life_loss", False),
        full_action_space=options.get("full_action_space", False),
    )
    assert ours["frames_after_reset"] == ref["frames_after_reset"]
    assert len(ours["reward"]) == len(ref["reward"])
    np.testing.assert_array_equal(ours["gray"], ref["gray"])
    np.testing.assert_array_equal(ours["rgb"], ref["rgb"])
    np.testing.assert_array_equal(ours["ram"], ref["ram"])
    np.testing.assert_array_equal(ours["reward"], ref["reward"])
    np.testing.assert_array_equal(ours["terminated"], ref["terminated"])


GYM_CASES = [
    # game, terminal_on_life_loss, frame_skip, screen_size, stack
    ("pong", False, 4, 84, 4),
    ("breakout", True, 4, 84, 4),
    ("frostbite", False, 4, 84, 4),
    ("ms_pacman", True, 4, 84, 4),
    ("seaquest", True, 2, 64, 2),
    ("space_invaders", False, 1, 42, 3),
]


@pytest.mark.parametrize(
    ("game", "life_loss", "frame_skip", "size", "stack"),
    GYM_CASES,
    ids=[f"{c[0]}-skip{c[2]}-{c[3]}px-stack{c[4]}" for c in GYM_CASES],
)
def test_observations_equal_gymnasium_preprocessing(
    game: str, life_loss: bool, frame_skip: int, size: int, stack: int
) -> None:
    """Bit-identical, including the step that ends the episode (no tolerance needed)."""
    env = AtariEnv(
        game,
        3,
        terminal_on_life_loss=life_loss,
        frame_skip=frame_skip,
        screen_size=size,
        stack=stack,
    )
    actions = random_actions(env, 250, seed=2)
    ours = play(env, 2, 777, actions, ("obs",))
    ref = gymnasium_episode(
        game,
        int(ours["frames_after_reset"]),
        actions,
        life_loss=life_loss,
        frame_skip=frame_skip,
        screen_size=size,
        stack=stack,
    )
    assert ours["obs"].shape == ref["obs"].shape
    np.testing.assert_array_equal(ours["obs"], ref["obs"])
    np.testing.assert_array_equal(ours["reward"], ref["reward"])
    np.testing.assert_array_equal(ours["terminated"], ref["terminated"])


def test_resize_is_bit_identical_to_cv2_inter_area() -> None:
    cv2 = pytest.importorskip("cv2")
    from neuroevo import ops

    rng = np.random.default_rng(0)
    images = np.concatenate(
        [
            rng.integers(0, 256, (40, 210, 160), dtype=np.uint8),
            # few levels, as Atari screens have: exercises ties in the rounding
            (rng.integers(0, 8, (40, 210, 160)) * 36).astype(np.uint8),
            np.full((2, 210, 160), 255, np.uint8),
        ]
    )
    for size in (84, 64, 42, 160, 17, 1):
        ours = ops.load("atari").neuroevo_atari_resize(images, size=size).numpy()
        ref = np.stack(
            [cv2.resize(im, (size, size), interpolation=cv2.INTER_AREA) for im in images]
        )
        np.testing.assert_array_equal(ours, ref, err_msg=f"size {size}")
    # 5 and 10 divide both 210 and 160: OpenCV's integer-scale path rounds a few pixels
    # differently (documented in atari_env.h); the difference stays within 1.
    for size in (5, 10):
        ours = ops.load("atari").neuroevo_atari_resize(images, size=size).numpy().astype(int)
        ref = np.stack(
            [cv2.resize(im, (size, size), interpolation=cv2.INTER_AREA) for im in images]
        )
        assert np.abs(ours - ref).max() <= 1


# ------------------------------------------------------------------------------ determinism


def test_same_seed_same_episode_in_any_slot_and_after_any_history(pong: AtariEnv) -> None:
    actions = random_actions(pong, 120, seed=3)
    first = play(pong, 0, 99, actions, ("obs", "ram"))
    pong.reset([1, 2], [5, 6])  # unrelated history in other slots and in slot 3
    pong.step([1, 2], [1, 2])
    play(pong, 3, 1234, actions[:50], ())
    again = play(pong, 3, 99, actions, ("obs", "ram"))
    for key in ("obs", "ram", "reward", "terminated", "truncated"):
        np.testing.assert_array_equal(first[key], again[key], err_msg=key)


def test_seed_decides_noop_count() -> None:
    env = AtariEnv("pong", 6, noop_max=30)
    seeds = np.array([0, 1, 2, 3, -5, 2**62], np.int64)
    env.reset(np.arange(6), seeds)
    expected = [episode_draws(int(s), 30)[1] for s in seeds]
    np.testing.assert_array_equal(env.frames(np.arange(6)).numpy(), expected)
    assert all(1 <= n <= 30 for n in expected)
    no_noops = AtariEnv("pong", 1, noop_max=0)
    no_noops.reset([0], [7])
    assert no_noops.frames([0]).numpy()[0] == 0


def test_truncation_after_max_episode_steps_then_reset_required() -> None:
    env = AtariEnv("pong", 1, max_episode_steps=5)
    env.reset([0], [0])
    for step in range(5):
        result = env.step([0], [0])
        assert not result.terminated.numpy()[0]
        assert result.truncated.numpy()[0] == (step == 4)
    assert env.frames([0]).numpy()[0] == episode_draws(0, 30)[1] + 5 * 4
    with pytest.raises(
        InvalidArgument, match=r"slot 0 \(indices\[0\]\) cannot be stepped: its episode is over"
    ):
        env.step([0], [0])
    env.reset([0], [0])
    env.step([0], [0])


# ---------------------------------------------------------------------------------- the API


def test_specs_and_action_set(pong: AtariEnv) -> None:
    assert pong.num_slots == 4
    assert pong.observation_spec.shape == (84, 84, 4)
    assert pong.observation_spec.dtype == tf.uint8
    assert pong.action_spec.discrete and pong.action_spec.num_actions == 6
    assert pong.action_meanings == ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]
    assert AtariEnv("pong", 1, full_action_space=True).action_spec.num_actions == 18
    small = AtariEnv("breakout", 1, screen_size=42, stack=2, noop_max=0)
    small.reset([0], [0])
    assert small.observation([0]).shape == (1, 42, 42, 2)


def test_outputs_have_static_shapes_in_graphs(pong: AtariEnv) -> None:
    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
    def shapes(indices: tf.Tensor) -> None:
        result = pong.step(indices, tf.zeros_like(indices))
        assert [t.shape.as_list() for t in result] == [[None]] * 3
        assert pong.observation(indices).shape.as_list() == [None, 84, 84, 4]
        assert pong.ram(indices).shape.as_list() == [None, 128]
        assert pong.screen(indices).shape.as_list() == [None, 210, 160]
        assert pong.screen(indices, rgb=True).shape.as_list() == [None, 210, 160, 3]
        assert pong.frames(indices).shape.as_list() == [None]

    shapes.get_concrete_function()


def test_eager_and_tf_function_agree() -> None:
    env = AtariEnv("breakout", 4, noop_max=10)
    indices = tf.constant([0, 2], tf.int32)
    actions = random_actions(env, 40, seed=4).astype(np.int32).reshape(20, 2)

    @tf.function
    def episode(seeds: tf.Tensor, actions: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        env.reset(indices, seeds)
        rewards = tf.TensorArray(tf.float32, size=20)
        for i in tf.range(20):
            rewards = rewards.write(i, env.step(indices, actions[i]).reward)
        return rewards.stack(), env.observation(indices)

    graph_rewards, graph_obs = episode(tf.constant([8, 9], tf.int64), tf.constant(actions))
    env.reset([1, 3], [8, 9])
    eager_rewards = [env.step([1, 3], a).reward.numpy() for a in actions]
    np.testing.assert_array_equal(graph_rewards.numpy(), eager_rewards)
    np.testing.assert_array_equal(graph_obs.numpy(), env.observation([1, 3]).numpy())


def test_step_returns_step_result(pong: AtariEnv) -> None:
    pong.reset([0, 1], [1, 2])
    result = pong.step([0, 1], [2, 3])
    assert isinstance(result, StepResult)
    assert result.reward.dtype == tf.float32
    assert result.terminated.dtype == tf.bool and result.truncated.dtype == tf.bool
    assert pong.behavior([0]).shape == (1, 128)
    assert pong.lives([0, 1]).dtype == tf.int32
    empty = pong.step(np.zeros([0], np.int32), np.zeros([0], np.int32))
    assert empty.reward.shape == (0,)


def test_games_listing_and_registry() -> None:
    games = list_games()
    assert {"pong", "breakout", "frostbite", "space_invaders"} <= set(games)
    assert games == sorted(games) and len(games) > 100
    env = make_env("atari", "pong", 2, noop_max=0)
    assert isinstance(env, AtariEnv) and env.num_slots == 2 and env.options.noop_max == 0
    with pytest.raises(ValueError, match=r"env kind: 'atary' is not one of .* \(did you mean"):
        make_env("atary", "pong", 1)


def test_unknown_game_suggests_close_matches() -> None:
    with pytest.raises(
        ValueError, match=r"unknown Atari game 'SpaceInvaders'; did you mean 'space_invaders'"
    ) as info:
        AtariEnv("SpaceInvaders", 1)
    assert "list_games()" in str(info.value)
    with pytest.raises(
        ValueError, match=r"unknown Atari game 'frostbyte'; did you mean 'frostbite'"
    ):
        AtariEnv("frostbyte", 1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_slots": 0}, r"num_slots must be in \[1, 65536\], got 0"),
        ({"frame_skip": 0}, r"frame_skip: 0 must be in \[1, 64\]"),
        ({"noop_max": -1}, r"noop_max: -1 must be in \[0, 100000\]"),
        ({"sticky_action_prob": 1.5}, r"sticky_action_prob: 1.5 must be in \[0, 1\]"),
        ({"sticky_action_prob": "0.25"}, r"sticky_action_prob: expected a number, got '0.25'"),
        ({"max_episode_steps": -3}, r"max_episode_steps must be in \[0, 2147483647\], got -3"),
        ({"screen_size": 200}, r"screen_size: 200 must be in \[1, 160\]"),
        ({"stack": 0}, r"stack: 0 must be in \[1, 64\]"),
        ({"fire_reset": 1}, r"fire_reset: expected true or false, got 1"),
        ({"num_slots": 2.0}, r"num_slots must be an int in \[1, 65536\], got 2.0"),
    ],
)
def test_constructor_rejects_bad_options(options: dict, message: str) -> None:
    kwargs = {"num_slots": 1, **options}
    with pytest.raises(ValueError, match=message):
        AtariEnv("pong", **kwargs)


# -------------------------------------------------------------------------------- bad input


def test_bad_calls_raise_invalid_argument_naming_the_problem() -> None:
    env = AtariEnv("pong", 3)
    raw = env._ops
    h = env.handle
    cases = [
        (
            lambda: env.reset([3], [0]),
            r"indices\[0\] = 3 is out of range: there are 3 slots \[0, 3\)",
        ),
        (lambda: env.reset([-1], [0]), r"indices\[0\] = -1 is out of range"),
        (lambda: env.reset([0, 2, 0], [1, 2, 3]), r"indices\[2\] = 0 duplicates indices\[0\]"),
        (
            lambda: env.reset([0, 1], [1]),
            r"seeds must have shape \[2\] \(one per index\), got \[1\]",
        ),
        (
            lambda: env.step([1], [0]),
            r"slot 1 \(indices\[0\]\) cannot be stepped: it has never been reset",
        ),
        (lambda: env.reset([[0]], [[0]]), r"indices must be a vector \[k\], got shape \[1,1\]"),
        (lambda: env.reset([2**32], [0]), r"indices\[0\] = 4294967296 is out of range"),
        (lambda: env.reset([1.0], [0]), r"indices must be integers, got float64"),
        (lambda: env.reset([0], [0.5]), r"seeds must be integers, got float64"),
        (lambda: env.step([0], [2**31]), r"actions must fit int32"),
    ]
    env.reset([0], [0])
    cases += [
        (
            lambda: env.step([0], [6]),
            r"actions\[0\] = 6 is out of range: pong has 6 actions \[0, 6\)",
        ),
        (lambda: env.step([0], [-1]), r"actions\[0\] = -1 is out of range"),
        (
            lambda: env.step([0], [1, 2]),
            r"actions must have shape \[1\] \(one per index\), got \[2\]",
        ),
        (lambda: env.observation([7]), r"indices\[0\] = 7 is out of range"),
        (lambda: env.ram([0, 0]), r"indices\[1\] = 0 duplicates indices\[0\]"),
        (lambda: env.screen([5], rgb=True), r"indices\[0\] = 5 is out of range"),
        (lambda: env.frames([0, 9]), r"indices\[1\] = 9 is out of range"),
        (
            lambda: raw.neuroevo_atari_observation(h, [0], screen_size=64),
            r"observation attrs screen_size=64, stack=4 do not match the env's "
            r"screen_size=84, stack=4",
        ),
        (
            lambda: raw.neuroevo_atari_step(tf.Variable(1.0).handle, [0], [0]),
            r"wrong type",
        ),
        (
            lambda: raw.neuroevo_atari_make(
                game="pong", rom_path="/nonexistent/pong.bin", num_slots=1, **MAKE_ATTRS
            ),
            r"cannot read rom_path '/nonexistent/pong.bin' \(game pong\)",
        ),
        (
            lambda: raw.neuroevo_atari_make(game="x", rom_path=__file__, num_slots=1, **MAKE_ATTRS),
            r"is not a ROM that ALE .* supports",
        ),
        (
            lambda: raw.neuroevo_atari_make(
                game="pong",
                rom_path=rom_path("pong"),
                num_slots=1,
                **(MAKE_ATTRS | {"sticky_action_prob": 2.0}),
            ),
            r"sticky_action_prob must be in \[0, 1\], got 2",
        ),
        (
            lambda: raw.neuroevo_atari_make(
                game="pong", rom_path=rom_path("pong"), num_slots=(1 << 16) + 1, **MAKE_ATTRS
            ),
            r"num_slots must be in \[1, 65536\], got 65537",
        ),
    ]
    for call, message in cases:
        with pytest.raises(InvalidArgument, match=message):
            call()
    with pytest.raises(TypeError, match="indices must be a tensor of dtype int32, got int64"):
        env.reset(tf.constant([0], tf.int64), [0])
    with pytest.raises(TypeError, match="seeds must be a tensor of dtype int64, got float32"):
        env.reset([0], tf.constant([0.5]))
    # Nothing above touched slot 0's episode: it still steps.
    env.step([0], [1])


def test_graph_mode_rejects_wrong_dtype_and_rank_when_tracing(pong: AtariEnv) -> None:
    @tf.function
    def wrong_dtype() -> StepResult:
        return pong.step(tf.constant([0], tf.int64), [0])

    @tf.function
    def wrong_rank() -> StepResult:
        return pong.step(tf.constant([[0]]), [0])

    with pytest.raises(TypeError, match="indices must be a tensor of dtype int32, got int64"):
        wrong_dtype()
    with pytest.raises(ValueError, match=r"indices must be a vector \[k\], got shape \[1,1\]"):
        wrong_rank()


def test_fuzz_random_bad_calls_leave_the_env_working() -> None:
    env = AtariEnv("pong", 4, max_episode_steps=3, noop_max=2)
    rng = np.random.default_rng(5)
    good = env.action_spec.num_actions
    failures = 0
    trials = 320
    for trial in range(trials):
        k = int(rng.integers(0, 6))
        kind = trial % 8
        indices = rng.integers(0, 4, k)
        if kind == 0:  # out-of-range indices
            indices = rng.choice([-(2**31), -7, -1, 4, 5, 2**31 - 1], max(k, 1))
        elif kind == 1:  # duplicates
            indices = np.array([*indices, 1, 1])
        actions = rng.integers(0, good, len(indices))
        if kind == 2:  # bad actions
            actions = rng.choice([-(2**31), -1, good, 99, 2**31 - 1], len(indices))
            indices = np.unique(indices)
            actions = actions[: len(indices)]
            if len(indices) == 0:
                indices, actions = np.array([0]), np.array([good])
        elif kind == 3:  # mismatched lengths
            actions = rng.integers(0, good, len(indices) + 1)
        calls = {
            0: lambda i=indices, a=actions: env.step(i, a),
            1: lambda i=indices: env.reset(i, np.zeros(len(i), np.int64)),
            2: lambda i=indices, a=actions: env.step(i, a),
            3: lambda i=indices, a=actions: env.step(i, a),
            4: lambda: env.observation(rng.integers(4, 100, 2)),
            5: lambda: env.step(rng.integers(0, 4, (2, 2)), [0, 0]),
            6: lambda: env.step(rng.random(2), [0, 0]),  # float indices
            7: lambda: env.reset([0, 1], rng.random(2)),  # float seeds
        }
        try:
            calls[kind]()
        except (InvalidArgument, ValueError, TypeError):
            failures += 1
        else:
            # A bad action is only caught if the slot is steppable: make sure it failed.
            raise AssertionError(f"trial {trial} (kind {kind}) did not fail")
    assert failures == trials
    env.reset([0, 1, 2, 3], [1, 2, 3, 4])
    result = env.step([3, 0], [1, 2])
    assert result.reward.shape == (2,)
    assert env.observation([0, 1, 2, 3]).shape == (4, 84, 84, 4)


# ----------------------------------------------------------------------------- concurrency


def test_two_threads_on_disjoint_slots_match_serial() -> None:
    env = AtariEnv("pong", 4, noop_max=5)
    actions = random_actions(env, 2 * 150, seed=6).reshape(150, 2)

    def run(slots: list[int], seeds: list[int], out: dict) -> None:
        env.reset(slots, seeds)
        rewards, obs = [], []
        for a in actions:
            rewards.append(env.step(slots, a).reward.numpy())
            obs.append(env.observation(slots).numpy())
        out["rewards"], out["obs"] = np.array(rewards), np.array(obs)

    serial: dict = {}
    run([0, 1], [11, 12], serial)
    parallel: list[dict] = [{}, {}]
    threads = [
        threading.Thread(target=run, args=([0, 1], [11, 12], parallel[0])),
        threading.Thread(target=run, args=([3, 2], [11, 12], parallel[1])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in parallel:
        np.testing.assert_array_equal(out["rewards"], serial["rewards"])
        np.testing.assert_array_equal(out["obs"], serial["obs"])


def test_overlapping_concurrent_calls_fail_cleanly_or_succeed() -> None:
    """Sharing a slot between concurrent calls is a usage error: it must never corrupt state.

    The threads keep colliding until at least one call was refused (or a deadline passes), so
    the test fails if it never exercised an overlap instead of passing vacuously.
    """
    env = AtariEnv("pong", 2, noop_max=0, max_episode_steps=0)
    errors: list[str] = []
    deadline = time.monotonic() + 300

    def hammer() -> None:
        calls = 0
        while calls < 60 or (not errors and time.monotonic() < deadline):
            calls += 1
            try:
                env.reset([0, 1], [3, 3])
            except InvalidArgument as exc:
                errors.append(str(exc))

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors, "no two calls ever overlapped: the contention path was not exercised"
    assert all("is in use by another call running at the same time" in e for e in errors)
    env.reset([0, 1], [3, 3])
    np.testing.assert_array_equal(env.observation([0]).numpy(), env.observation([1]).numpy())


def _cpu_seconds_per_thread() -> dict[str, float]:
    """utime + stime of every thread of this process, from /proc (Linux)."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[tid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def test_slots_are_created_in_parallel() -> None:
    """Creation runs on the worker pool: several threads each load some of the emulators.

    Measured as CPU time per thread, which a busy shared machine does not distort the way it
    distorts wall-clock speedups.
    """
    import os

    if not os.path.isdir("/proc/self/task") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs Linux /proc and 2 cores")
    before = _cpu_seconds_per_thread()
    AtariEnv("pong", 8)  # ~70 ms of CPU per emulator
    after = _cpu_seconds_per_thread()
    busy = [tid for tid, t in after.items() if t - before.get(tid, 0.0) >= 0.1]
    assert len(busy) >= 2, f"only {len(busy)} thread(s) did the creation work"


def test_close_drops_the_handle() -> None:
    env = AtariEnv("pong", 1)
    env.close()
    with pytest.raises(EnvClosedError, match=r"AtariEnv\('pong', .*\) is closed"):
        env.reset([0], [0])


def test_observation_of_no_slots_is_empty():
    """An empty index vector reads an empty [0, ...] batch, no slot."""
    env = AtariEnv("pong", num_slots=2)
    obs = env.observation(tf.zeros([0], tf.int32))
    assert obs.shape == (0, *env.observation_spec.shape)
    env.close()
