"""The MuJoCo env op: parity with gymnasium's v5 envs, seeding, bad input, isolation of slots."""

from __future__ import annotations

import threading

import gymnasium
import mujoco
import numpy as np
import pytest
import tensorflow as tf

from neuroevo import ops
from neuroevo.config.schema import load_config
from neuroevo.core.params import ParamError
from neuroevo.envs.mujoco import (
    ASSETS,
    NAN_ACTION,
    PHYSICS_WARNING,
    TASKS,
    MujocoEnv,
    model_path,
)

MAKE_ATTRS = {
    "frame_skip": 0,
    "reset_noise_scale": -1.0,
    "max_episode_steps": 0,
    "terminate_when_unhealthy": True,
}
"""The raw make op's settings (it has no defaults of its own; 0 / -1 mean the task's)."""

TOLERANCE = 1e-6  # absolute, or relative to the gymnasium value when that exceeds 1


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path, monkeypatch):
    # gymnasium's own model loading may write MUJOCO_LOG.TXT into the working directory.
    monkeypatch.chdir(tmp_path)


def _error(ours: np.ndarray, theirs: np.ndarray) -> float:
    theirs = np.asarray(theirs, np.float64)
    return float(np.max(np.abs(ours - theirs) / np.maximum(1.0, np.abs(theirs)), initial=0.0))


class RootPosition:
    """The root body's world (x, y) by MuJoCo's own forward kinematics of a copy of ``qpos``."""

    def __init__(self, model: mujoco.MjModel):
        self.model, self.data = model, mujoco.MjData(model)
        self.body = model.jnt_bodyid[0]

    def __call__(self, qpos: np.ndarray) -> np.ndarray:
        self.data.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, self.data)
        return self.data.xpos[self.body, :2].copy()


def _run_side_by_side(task: str, episodes: int, **options) -> dict[str, float]:
    """Runs ``episodes`` episodes in both implementations from identical states and actions.

    ``xml_file`` (gymnasium's name) becomes the env's ``model_xml``."""
    reference = [gymnasium.make(f"{task}-v5", **options) for _ in range(episodes)]
    max_steps = reference[0].spec.max_episode_steps
    env_options = {k: v for k, v in options.items() if k not in ("max_episode_steps", "xml_file")}
    if "xml_file" in options:
        env_options["model_xml"] = options["xml_file"]
    env = MujocoEnv(task, episodes, max_episode_steps=max_steps, **env_options)
    root = RootPosition(reference[0].unwrapped.model)
    starts = [ref.reset(seed=seed)[0] for seed, ref in enumerate(reference)]
    qpos = np.stack([ref.unwrapped.data.qpos for ref in reference])
    qvel = np.stack([ref.unwrapped.data.qvel for ref in reference])
    env.set_state(np.arange(episodes), qpos, qvel)
    worst = {"observation": _error(env.observation(np.arange(episodes)).numpy(), starts)}
    worst["reward"] = 0.0
    worst["behavior"] = 0.0
    counts = {"terminated": 0, "truncated": 0, "steps": 0}
    rng = np.random.default_rng(1)
    low, high = env.action_spec.low, env.action_spec.high
    running = list(range(episodes))
    while running:
        actions = rng.uniform(low, high, (len(running), len(low))).astype(np.float32)
        result = env.step(running, actions)
        observations = env.observation(running).numpy()
        positions = env.behavior(running).numpy()
        still = []
        for row, slot in enumerate(running):
            obs, reward, terminated, truncated, _ = reference[slot].step(actions[row])
            worst["observation"] = max(worst["observation"], _error(observations[row], obs))
            where = root(reference[slot].unwrapped.data.qpos)
            worst["behavior"] = max(worst["behavior"], _error(positions[row], where))
            worst["reward"] = max(worst["reward"], _error(result.reward[row].numpy(), reward))
            assert bool(result.terminated[row]) == terminated, (task, slot, counts)
            assert bool(result.truncated[row]) == truncated, (task, slot, counts)
            counts["terminated"] += terminated
            counts["truncated"] += truncated
            counts["steps"] += 1
            if not (terminated or truncated):
                still.append(slot)
        running = still
    assert max(worst.values()) <= TOLERANCE, worst
    assert env.frames(np.arange(episodes)).numpy().sum() == counts["steps"]
    return counts


@pytest.mark.parametrize("task", sorted(TASKS))
def test_matches_gymnasium_until_termination(task):
    counts = _run_side_by_side(task, episodes=3)
    if task == "HalfCheetah":  # never terminates: every episode runs into the 1000-step cutoff
        assert counts["truncated"] == 3 and counts["steps"] == 3000
    else:  # random actions make the robots fall (Ant's may also walk on to the cutoff)
        assert counts["terminated"] >= 2
        assert counts["terminated"] + counts["truncated"] == 3


@pytest.mark.parametrize("task", ["Ant", "Hopper", "Humanoid", "Walker2d"])
def test_matches_gymnasium_over_long_episodes(task):
    # Without health termination a fallen robot keeps going: long contact-rich trajectories.
    counts = _run_side_by_side(
        task, episodes=1, max_episode_steps=300, terminate_when_unhealthy=False
    )
    assert counts == {"terminated": 0, "truncated": 1, "steps": 300}


def test_humanoid_trap_xml_matches_gymnasium_on_the_same_file():
    """The shipped trap through ``model_xml`` equals gymnasium's Humanoid-v5 given the same
    ``xml_file``; the walls are in the model."""
    path = str(ASSETS / "humanoid_trap.xml")
    counts = _run_side_by_side("Humanoid", episodes=2, xml_file=path)
    assert counts["terminated"] + counts["truncated"] == 2
    env = MujocoEnv("Humanoid", 1, model_xml="humanoid_trap.xml")  # found among the shipped
    assert env.model_path == ASSETS / "humanoid_trap.xml"
    model = mujoco.MjModel.from_xml_path(path)
    assert {model.geom(i).name for i in range(model.ngeom)} >= {"frontwall", "topwall"}


def test_custom_planar_xml_matches_gymnasium(tmp_path):
    """A user's edit of hopper.xml (heavier, on ice) runs under Hopper's rules as in gymnasium."""
    text = model_path("Hopper").read_text()
    edited = text.replace('friction="2.0"', 'friction="0.3"').replace(
        'name="torso_geom"', 'name="torso_geom" density="3000"', 1
    )
    assert edited != text
    xml = tmp_path / "heavy_hopper.xml"
    xml.write_text(edited)
    counts = _run_side_by_side("Hopper", episodes=2, xml_file=str(xml))
    assert counts["terminated"] + counts["truncated"] == 2


def test_bad_model_xml_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"no MuJoCo model file 'missing\.xml'.*humanoid_trap"):
        MujocoEnv("Hopper", 1, model_xml="missing.xml")
    with pytest.raises(ParamError, match=r"^env\.mujoco\.model_xml: no MuJoCo model file"):
        load_config(None, ["budget.generations=1", "env.kind=mujoco", "env.mujoco.model_xml=x"])
    garbage = tmp_path / "garbage.xml"
    garbage.write_text("<mujoco><worldbody><body><geom type='nonsense'/></body>")
    with pytest.raises(ValueError, match=r"^env\.mujoco\.model_xml: .*cannot load the MuJoCo"):
        MujocoEnv("Hopper", 1, model_xml=str(garbage))
    trap = str(ASSETS / "humanoid_trap.xml")
    with pytest.raises(
        ValueError,
        match=r"does not fit task Hopper: the task needs the planar root joints rootx .* but "
        r"joint 0 'root' is a free joint of body 1",
    ):
        MujocoEnv("Hopper", 1, model_xml=trap)
    with pytest.raises(
        ValueError,
        match=r"does not fit task Ant: the task needs a free root joint .* but joint 0 'rootx' "
        r"is a slide joint",
    ):
        MujocoEnv("Ant", 1, model_xml=str(model_path("Walker2d")))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not XML at all", "XML parse error"),
        (None, "XML parse error"),  # the task's own file, cut in half
        ('<mujoco><include file="gone.xml"/></mujoco>', "Error opening file 'gone.xml'"),
        (
            "<mujoco><worldbody><body><geom type='sphere' size='.1'/></body></worldbody></mujoco>",
            r"\(nq=0, nv=0, nbody=2, nu=0\) is too small for task Hopper",
        ),
    ],
)
def test_an_unusable_model_file_is_a_value_error_naming_the_key(tmp_path, text, message):
    """Not a TensorFlow error: the CLI reports a ValueError as one line (tests/test_cli_errors)."""
    path = tmp_path / "model.xml"
    if text is None:
        whole = model_path("Hopper").read_text()
        text = whole[: len(whole) // 2]
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"^env\.mujoco\.model_xml: {path} .*{message}"):
        MujocoEnv("Hopper", 1, model_xml=str(path))


def test_specs_match_gymnasium():
    for task in TASKS:
        reference = gymnasium.make(f"{task}-v5")
        env = MujocoEnv(f"{task}-v5", 1)
        assert env.observation_spec.shape == reference.observation_space.shape
        assert env.observation_spec.dtype == tf.float32
        assert not env.action_spec.discrete
        np.testing.assert_array_equal(env.action_spec.low, reference.action_space.low)
        np.testing.assert_array_equal(env.action_spec.high, reference.action_space.high)


def test_same_seed_same_episode_on_any_slot():
    env = MujocoEnv("Hopper", 4)
    env.reset([0, 1, 2, 3], [7, 8, 7, -5])
    obs = env.observation([0, 1, 2, 3]).numpy()
    np.testing.assert_array_equal(obs[0], obs[2])
    assert not np.array_equal(obs[0], obs[1])
    actions = np.full((2, 3), 0.3, np.float32)
    first = env.step([2, 0], actions)
    np.testing.assert_array_equal(first.reward[0], first.reward[1])
    np.testing.assert_array_equal(env.observation([0]), env.observation([2]))
    # Reset noise is within the task's scale around the model's initial pose.
    qpos0 = np.array([0.0, 1.25, 0.0, 0.0, 0.0, 0.0])
    assert np.all(np.abs(obs[:, :5] - qpos0[1:]) <= 5e-3 + 1e-7)


def test_unknown_task_lists_valid_ones():
    with pytest.raises(ValueError, match="valid tasks: Ant, HalfCheetah, Hopper, Humanoid"):
        MujocoEnv("Cheetah", 1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="valid tasks: Ant, HalfCheetah"):
        ops.load("mujoco").neuroevo_mujoco_make(
            task="Swimmer", xml_path=str(model_path("Hopper")), num_slots=1, **MAKE_ATTRS
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match="cannot load the MuJoCo model"):
        ops.load("mujoco").neuroevo_mujoco_make(
            task="Hopper", xml_path="/nope.xml", num_slots=1, **MAKE_ATTRS
        )


@pytest.mark.parametrize(
    ("indices", "actions", "message"),
    [
        ([0, 1], np.zeros((2, 2), np.float32), r"actions must have shape \[2,3\]"),
        ([0], np.zeros((2, 3), np.float32), r"actions must have shape \[1,3\]"),
        ([0, 2], np.zeros((2, 3), np.float32), r"indices\[1\] = 2 is out of range"),
        ([-1], np.zeros((1, 3), np.float32), r"indices\[0\] = -1 is out of range"),
        ([1, 1], np.zeros((2, 3), np.float32), r"duplicates indices\[0\]"),
    ],
)
def test_bad_step_input_is_rejected(indices, actions, message):
    env = MujocoEnv("Hopper", 2)
    env.reset([0, 1], [0, 1])
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        env.step(indices, actions)


def test_stepping_needs_a_running_episode():
    env = MujocoEnv("Hopper", 2, max_episode_steps=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="never been reset"):
        env.step([0], np.zeros((1, 3), np.float32))
    env.reset([0], [0])
    assert not env.step([0], np.zeros((1, 3), np.float32)).truncated[0]
    assert env.step([0], np.zeros((1, 3), np.float32)).truncated[0]
    assert env.frames([0]).numpy()[0] == 2
    with pytest.raises(tf.errors.InvalidArgumentError, match="episode is over"):
        env.step([0], np.zeros((1, 3), np.float32))


def test_nan_action_ends_only_that_episode_and_inf_is_clipped():
    env = MujocoEnv("Hopper", 3)
    env.reset([0, 1, 2], [5, 5, 5])
    actions = np.array([[np.nan, 0, 0], [np.inf, -np.inf, 0.5], [1, -1, 0.5]], np.float32)
    result = env.step([0, 1, 2], actions)
    assert result.terminated.numpy().tolist() == [True, False, False]
    assert result.reward[0] == 0
    assert env.flags([0, 1, 2]).numpy().tolist() == [NAN_ACTION, 0, 0]
    # +-inf acts as the bounds of the control range.
    np.testing.assert_array_equal(result.reward[1], result.reward[2])
    np.testing.assert_array_equal(env.observation([1]), env.observation([2]))
    env.reset([0], [5])
    assert env.flags([0]).numpy()[0] == 0


def test_physics_blowup_ends_the_episode_and_spares_other_slots():
    env = MujocoEnv("Hopper", 3)
    alone = MujocoEnv("Hopper", 1)
    qpos = np.tile([0.0, 1.25, 0.0, 0.0, 0.0, 0.0], (3, 1))
    qvel = np.zeros((3, 6))
    qvel[0, 3] = np.nan
    qvel[2, 4] = 1e30
    env.set_state([0, 1, 2], qpos, qvel)
    alone.set_state([0], qpos[1:2], qvel[1:2])
    actions = np.full((3, 3), 0.5, np.float32)
    result = env.step([0, 1, 2], actions)
    reference = alone.step([0], actions[1:2])
    assert result.terminated.numpy().tolist() == [True, False, True]
    assert result.reward.numpy()[[0, 2]].tolist() == [0, 0]
    assert env.flags([0, 1, 2]).numpy().tolist() == [PHYSICS_WARNING, 0, PHYSICS_WARNING]
    np.testing.assert_array_equal(result.reward[1], reference.reward[0])
    np.testing.assert_array_equal(env.observation([1]), alone.observation([0]))
    assert np.isfinite(env.observation([0, 1, 2]).numpy()).all()


def test_runs_inside_tf_function_with_static_shapes():
    env = MujocoEnv("Walker2d", 4)

    @tf.function(autograph=False)
    def episode_start(indices, seeds):
        reset = env.reset(indices, seeds)
        with tf.control_dependencies([reset]):
            obs = env.observation(indices)
        actions = tf.zeros([tf.size(indices), 6])
        with tf.control_dependencies([obs]):
            result = env.step(indices, actions)
        return obs, result

    obs, result = episode_start(tf.constant([3, 1]), tf.constant([1, 2], tf.int64))
    assert obs.shape == (2, 17) and result.reward.shape == (2,)
    spec = tf.TensorSpec([None], tf.int32)
    traced = tf.function(env.observation).get_concrete_function(spec)
    assert traced.structured_outputs.shape.as_list() == [None, 17]


def test_options_change_the_episode():
    fallen_qpos = np.array([[0.0, 0.3, 0.0, 0.0, 0.0, 0.0]])  # torso below the healthy height
    for terminate in (True, False):
        env = MujocoEnv("Hopper", 1, terminate_when_unhealthy=terminate)
        env.set_state([0], fallen_qpos, np.zeros((1, 6)))
        result = env.step([0], np.zeros((1, 3), np.float32))
        assert bool(result.terminated[0]) == terminate
    quiet = MujocoEnv("HalfCheetah", 2, reset_noise_scale=0.0, frame_skip=1)
    quiet.reset([0, 1], [1, 2])
    obs = quiet.observation([0, 1]).numpy()
    np.testing.assert_array_equal(obs[0], obs[1])
    with pytest.raises(ValueError, match=r"frame_skip: 0 must be in \[1, 1000\] or null"):
        MujocoEnv("Hopper", 1, frame_skip=0)
    with pytest.raises(ValueError, match=r"frame_skip: 1000000000000 must be in \[1, 1000\]"):
        MujocoEnv("Hopper", 1, frame_skip=10**12)  # beyond the op's int32 attribute


def test_model_warnings_do_not_write_a_log_file(tmp_path):
    MujocoEnv("HalfCheetah", 1)  # its model's settotalmass is deprecated: MuJoCo warns
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_concurrent_calls_on_disjoint_slots_match_sequential_ones():
    def run(env, slots, rewards):
        env.reset(slots, [100 + s for s in slots])
        actions = np.full((len(slots), 8), 0.2, np.float32)
        for _ in range(40):
            rewards.append(env.step(slots, actions).reward.numpy())
            actions = -actions

    sequential = MujocoEnv("Ant", 4)
    expected: list = []
    run(sequential, [0, 1, 2, 3], expected)
    concurrent = MujocoEnv("Ant", 4)
    halves: list[list] = [[], []]
    threads = [
        threading.Thread(target=run, args=(concurrent, slots, out))
        for slots, out in zip(([0, 1], [2, 3]), halves, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    np.testing.assert_array_equal(np.concatenate([halves[0], halves[1]], axis=1), expected)


def test_one_batched_call_matches_a_call_per_slot(rng):
    """A call on many slots spreads them over the worker pool; one slot per call runs inline.
    Both must step every listed slot once, with its own row of actions and outputs."""
    slots = rng.permutation(37)  # odd count, shuffled order
    seeds = rng.integers(0, 2**31, 37)
    batched, single = MujocoEnv("Hopper", 37), MujocoEnv("Hopper", 37)
    for env in (batched, single):
        env.reset(slots, seeds[slots])
    for step in range(40):
        actions = rng.uniform(-1, 1, (len(slots), 3)).astype(np.float32)
        result = batched.step(slots, actions)
        for row, slot in enumerate(slots):
            expected = single.step([slot], actions[row : row + 1])
            assert result.reward[row] == expected.reward[0], (step, slot)
            assert result.terminated[row] == expected.terminated[0], (step, slot)
        np.testing.assert_array_equal(batched.observation(slots), single.observation(slots))
        done = slots[(result.terminated | result.truncated).numpy()]
        for env in (batched, single):
            env.reset(done, seeds[done] + step + 1)
