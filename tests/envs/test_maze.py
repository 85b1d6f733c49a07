"""The maze op against a plain-Python robot written from the original novelty-search code.

The reference below follows Lehman & Stanley's ``maze.h`` step by step, with its own geometry
(a rangefinder's end point rotated about the robot, the original's segment intersection
formula, the goal rotated into the robot's frame for the radar), so a slip in the op's
vector maths shows up as a mismatch in sensors, motion or collisions.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from neuroevo.config.schema import load_config
from neuroevo.envs import ENV_KINDS, RecordsVideo, make_env
from neuroevo.envs.maze import BOUNDS, GOAL, HARD_MAZE, MAPS, START, WALLS, MazeEnv, MazeMap

SENSOR_ANGLES = (-90.0, -45.0, 0.0, 45.0, 90.0, -180.0)
RADAR = ((315.0, 405.0), (45.0, 135.0), (135.0, 225.0), (225.0, 315.0))


def rotate(px: float, py: float, degrees: float, cx: float, cy: float) -> tuple[float, float]:
    rad = degrees / 180.0 * math.pi
    ox, oy = px - cx, py - cy
    return cx + math.cos(rad) * ox - math.sin(rad) * oy, cy + math.sin(rad) * ox + math.cos(
        rad
    ) * oy


def intersection(wall, a, b):
    """The original's ``Line::intersection``: where segment a-b strictly crosses ``wall``."""
    (cx, cy, dx, dy), (ax, ay), (bx, by) = wall, a, b
    r_top = (ay - cy) * (dx - cx) - (ax - cx) * (dy - cy)
    s_top = (ay - cy) * (bx - ax) - (ax - cx) * (by - ay)
    bottom = (bx - ax) * (dy - cy) - (by - ay) * (dx - cx)
    if bottom == 0:
        return None
    r, s = r_top / bottom, s_top / bottom
    if 0 < r < 1 and 0 < s < 1:
        return ax + r * (bx - ax), ay + r * (by - ay)
    return None


def wall_distance(wall, p):
    (ax, ay, bx, by), (px, py) = wall, p
    length2 = (bx - ax) ** 2 + (by - ay) ** 2
    u = ((px - ax) * (bx - ax) + (py - ay) * (by - ay)) / length2
    if u < 0 or u > 1:
        return min(math.dist((ax, ay), p), math.dist((bx, by), p))
    return math.dist((ax + u * (bx - ax), ay + u * (by - ay)), p)


class ReferenceRobot:
    """One robot, as the original C++ simulates it (with all ten sensors in the inputs)."""

    def __init__(self, maze: MazeMap, goal_radius: float = 5.0, max_steps: int = 400):
        self.maze, self.goal_radius, self.max_steps = maze, goal_radius, max_steps
        self.x, self.y = maze.start
        self.heading, self.speed, self.turn_rate = maze.start_heading, 0.0, 0.0
        self.steps, self.potential, self.collisions = 0, 0.0, 0

    def sensors(self) -> list[float]:
        out = [1.0]
        for angle in SENSOR_ANGLES:
            rad = angle / 180.0 * math.pi
            end = rotate(
                self.x + math.cos(rad) * 100,
                self.y + math.sin(rad) * 100,
                self.heading,
                self.x,
                self.y,
            )
            nearest = 100.0
            for wall in self.maze.walls:
                hit = intersection(wall, (self.x, self.y), end)
                if hit is not None:
                    nearest = min(nearest, math.dist(hit, (self.x, self.y)))
            out.append(nearest / 100)
        gx, gy = rotate(*self.maze.goal, -self.heading, self.x, self.y)
        angle = math.degrees(math.atan2(gy - self.y, gx - self.x))
        angle = angle + 360 if angle < 0 else angle
        out += [float(lo <= angle < hi or lo <= angle + 360 < hi) for lo, hi in RADAR]
        return out

    def step(self, action) -> tuple[float, bool, bool]:
        self.steps += 1
        o1, o2 = (min(max(float(a), 0.0), 1.0) for a in action)
        self.turn_rate = min(max(self.turn_rate + (o1 - 0.5), -3.0), 3.0)
        self.speed = min(max(self.speed + (o2 - 0.5), -3.0), 3.0)
        vx = math.cos(self.heading / 180 * math.pi) * self.speed
        vy = math.sin(self.heading / 180 * math.pi) * self.speed
        self.heading += self.turn_rate
        if self.heading > 360:
            self.heading -= 360
        if self.heading < 0:
            self.heading += 360
        new = (self.x + vx, self.y + vy)
        if any(wall_distance(w, new) < 8 for w in self.maze.walls):
            self.collisions += 1
        else:
            self.x, self.y = new
        distance = math.dist((self.x, self.y), self.maze.goal)
        reward, self.potential = -distance - self.potential, -distance
        return reward, distance < self.goal_radius, self.steps >= self.max_steps


def random_actions(rng: np.random.Generator, steps: int, k: int) -> np.ndarray:
    """Actions that wander: a smooth bias per robot plus noise, some outside [0, 1]."""
    bias = rng.uniform(0.3, 0.7, (1, k, 2))
    return (bias + rng.normal(0, 0.35, (steps, k, 2))).astype(np.float32)


@pytest.mark.parametrize("maze,goal_radius", [("hard", 5.0), ("medium", 5.0), ("hard", 120.0)])
def test_steps_match_the_reference_robot(maze, goal_radius, rng):
    k, steps = 12, 400
    env = MazeEnv(maze, k + 3, goal_radius=goal_radius)
    slots = rng.choice(k + 3, k, replace=False).astype(np.int32)
    env.reset(slots, rng.integers(-(2**63), 2**63 - 1, k))
    robots = [ReferenceRobot(MAPS[maze], goal_radius) for _ in range(k)]
    actions = random_actions(rng, steps, k)
    running = np.ones(k, bool)
    returns = np.zeros(k)
    for t in range(steps):
        rows = np.flatnonzero(running)
        if rows.size == 0:
            break
        idx = slots[rows]
        obs = env.observation(idx).numpy()
        np.testing.assert_allclose(
            obs, [robots[r].sensors() for r in rows], atol=1e-5, err_msg=f"step {t}"
        )
        reward, terminated, truncated = (x.numpy() for x in env.step(idx, actions[t, rows]))
        expected = [robots[r].step(actions[t, r]) for r in rows]
        np.testing.assert_allclose(reward, [e[0] for e in expected], rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(terminated, [e[1] for e in expected])
        np.testing.assert_array_equal(truncated, [e[2] for e in expected])
        state = env.state(idx).numpy()
        want = np.array(
            [
                [robots[r].x, robots[r].y, robots[r].heading, robots[r].speed, robots[r].turn_rate]
                for r in rows
            ]
        )
        np.testing.assert_allclose(state, want, atol=1e-9, err_msg=f"state at step {t}")
        np.testing.assert_allclose(env.behavior(idx).numpy(), want[:, :2], rtol=1e-6)
        returns[rows] += reward
        running[rows] = ~(terminated | truncated)
    np.testing.assert_array_equal(env.frames(slots).numpy(), [r.steps for r in robots])
    final = np.array([math.dist((r.x, r.y), MAPS[maze].goal) for r in robots])
    np.testing.assert_allclose(returns, -final, atol=1e-3)  # the return is -final distance
    assert sum(r.collisions for r in robots) > 10  # the walls were hit, and stopped the robots
    if goal_radius > 100:
        assert any(r.steps < steps for r in robots)  # goals were reached: episodes ended early


def test_start_sensors_by_hand():
    """At the hard maze's start (36, 184), heading +x: walls 16 above (y = 200), 31 behind."""
    env = MazeEnv("hard", 1)
    env.reset([0], [0])
    obs = env.observation([0]).numpy()[0]
    # -90: nothing within 100 (the way down is open to y = 84); 0: the slanted wall from
    # (77, 200) to (108, 164) crosses y = 184 at x = 77 + 16 * 31 / 36.
    ahead = (77 + 16 * 31 / 36 - 36) / 100
    np.testing.assert_allclose(obs[[0, 1, 3, 5, 6]], [1, 1, ahead, 0.16, 0.31], rtol=1e-6)
    np.testing.assert_allclose(obs[4], 16 * math.sqrt(2) / 100, rtol=1e-6)  # +45 hits y = 200
    np.testing.assert_array_equal(obs[7:], [0, 0, 0, 1])  # the goal is at -92 degrees


def test_episode_rules():
    env = MazeEnv("hard", 3, max_episode_steps=5)
    env.reset([0, 1, 2], [1, 2, 3])
    for t in range(5):
        actions = np.full((3, 2), 0.5, np.float32)
        actions[1] = [np.nan, 0.5] if t == 2 else actions[1]
        rows = [0, 2] if t > 2 else [0, 1, 2]
        _, terminated, truncated = env.step(rows, actions[rows])
        if t == 2:
            assert terminated.numpy().tolist() == [False, True, False]
    assert truncated.numpy().tolist() == [True, True]
    np.testing.assert_array_equal(env.flags([0, 1, 2]).numpy(), [0, 2, 0])
    np.testing.assert_array_equal(env.frames([0, 1, 2]).numpy(), [5, 3, 5])
    np.testing.assert_allclose(env.behavior([0, 1, 2]).numpy(), [START] * 3)  # at rest
    with pytest.raises(tf.errors.InvalidArgumentError, match="episode is over"):
        env.step([0], np.zeros((1, 2), np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"actions must have shape \[1,2\]"):
        env.reset([0], [0])
        env.step([0], np.zeros((1, 3), np.float32))


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="unknown maze 'hardest'; valid mazes: hard, medium"):
        MazeEnv("hardest", 2)
    with pytest.raises(ValueError, match="goal_radius"):
        MazeEnv("hard", 2, goal_radius=0.0)
    with pytest.raises(ValueError, match="max_episode_steps"):
        MazeEnv("hard", 2, max_episode_steps=-1)
    with pytest.raises(ValueError, match="num_slots"):
        MazeEnv("hard", 0)


def test_registered_with_its_config_section_and_map_geometry():
    assert ENV_KINDS["maze"] is MazeEnv
    cfg = load_config(
        None, ["budget.generations=1", "env.kind=maze", "env.id=hard", "model.name=mlp"]
    )
    assert cfg.env.options.goal_radius == 5.0
    env = make_env("maze", "medium", 2, max_episode_steps=10)
    assert env.observation_spec.shape == (11,) and env.action_spec.shape == (2,)
    assert (HARD_MAZE.walls, HARD_MAZE.start, HARD_MAZE.goal) == (WALLS, START, GOAL)
    assert HARD_MAZE.start == (36, 184) and HARD_MAZE.goal == (31, 20)
    assert HARD_MAZE.bounds == BOUNDS == (5, 5, 200, 200)


def test_screen_draws_the_robot_where_it_is():
    """Frames for ``play --video``: the robot's blue disc is centred on its position."""
    env = MazeEnv("hard", 2)
    assert isinstance(env, RecordsVideo)
    env.reset([0, 1], [0, 0])
    for _ in range(30):
        env.step([1], [[0.6, 1.0]])
    frames = env.screen([0, 1], rgb=True).numpy()
    assert frames.shape == (2, 392, 392, 3) and frames.dtype == np.uint8
    for frame, (x, y) in zip(frames, env.behavior([0, 1]).numpy(), strict=True):
        rows, cols = np.nonzero((frame == (30, 80, 220)).all(-1))
        np.testing.assert_allclose([cols.mean() / 2 + 5, rows.mean() / 2 + 5], [x, y], atol=1.0)
    assert (frames[0, 0, :] == 0).all(-1).sum() > 380  # the top wall (y = 5) runs across
    assert env.screen([1]).numpy().shape == (1, 392, 392)
