"""Lehman & Stanley's deceptive maze navigation task, stepped in C++ inside TensorFlow ops.

The task of "Abandoning objectives: evolution through the search for novelty alone" (Lehman &
Stanley 2011), the deceptive benchmark of novelty search, as its original code defines it (the
maps are the original's ``hard_maze.txt`` and ``medium_maze.txt``; docs/MAZE.md draws them):

* **Robot**: a disc of radius 8 at ``(x, y)`` with a heading in degrees (counter-clockwise from
  +x), a speed and an angular velocity, both starting at 0 and bounded to [-3, 3].
* **Observation** (float32 ``[11]``): a bias 1; six rangefinders at -90, -45, 0, 45, 90 and
  -180 degrees from the heading, each the distance to the nearest wall along its ray divided
  by the range 100 (1 when nothing is in range); four goal radar sectors, 1 for the one the
  goal lies in: front [-45, 45), left [45, 135), back [135, 225), right [225, 315) degrees
  (counter-clockwise, relative to the heading). The original code's input vector lets the
  first radar overwrite the rear (-180) rangefinder, an indexing slip this env does not copy.
* **Action** (float32 ``[2]``, clipped to [0, 1]): ``(turn, throttle)``; each step adds
  ``turn - 0.5`` to the angular velocity and ``throttle - 0.5`` to the speed (then clamps
  them), moves the robot ``speed`` along its old heading, then turns it by the angular
  velocity. A move that would bring the robot's centre closer than its radius to any wall is
  cancelled (the robot stays, its speed unchanged), as in the original.
* **Reward**: the step's change of ``-distance(robot, goal)``, and ``-distance`` after the
  first step, so an episode's return is minus the final distance to the goal: Lehman &
  Stanley's fitness ``300 - distance`` shifted by a constant (same ranking); it is also right
  when an evaluator cuts the episode short.
* **Episode end**: ``terminated`` when the robot's centre comes within ``goal_radius`` (5, as in
  the original) of the goal; ``truncated`` after ``max_episode_steps`` (400 by default, the
  paper's evaluation length). Episodes are deterministic: the seed is unused.
* **Behaviour** (``behavior``): the robot's ``(x, y)``, the paper's characterisation when read
  at the episode's end.

The hard maze's trap: the radar and the fitness pull the robot up the left corridor to a
dead end just below the goal; the way to the goal runs the other way, round the long wall.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import tensorflow as tf

from neuroevo import ops
from neuroevo.core.indices import float_tensor, seed_tensor
from neuroevo.envs.base import ActionSpec, ObservationSpec, OpEnv, StepResult
from neuroevo.envs.params import MazeParams

__all__ = [
    "BOUNDS",
    "GOAL",
    "HARD_MAZE",
    "MAPS",
    "MAX_EPISODE_STEPS",
    "MEDIUM_MAZE",
    "NAN_ACTION",
    "OBSERVATION_SIZE",
    "START",
    "WALLS",
    "MazeEnv",
    "MazeMap",
    "MazeParams",
    "draw",
    "maze_map",
]

MAX_EPISODE_STEPS = 400
"""Default per-episode cutoff in steps: the evaluation length of Lehman & Stanley (2011)."""
OBSERVATION_SIZE = 11  # bias, six rangefinders, four radar sectors (maze_env.h)
NAN_ACTION = 2  # flag: the episode ended on a NaN action (the same bit as MuJoCo's)
ROBOT_RADIUS = 8.0
RANGEFINDER_RANGE = 100.0


@dataclasses.dataclass(frozen=True)
class MazeMap:
    """A maze: wall segments, the robot's start pose and the goal, in the original's units.

    Attributes:
        walls: one ``(x0, y0, x1, y1)`` per wall segment, the outer boundary included.
        start: the robot's starting ``(x, y)``.
        start_heading: its starting heading, degrees counter-clockwise from +x.
        goal: the goal's ``(x, y)``.
    """

    walls: tuple[tuple[float, float, float, float], ...]
    start: tuple[float, float]
    start_heading: float
    goal: tuple[float, float]

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """``(x_min, y_min, x_max, y_max)`` of the walls: the drawable extent of the map."""
        corners = np.asarray(self.walls, np.float64).reshape(-1, 2)
        (x_min, y_min), (x_max, y_max) = corners.min(0), corners.max(0)
        return float(x_min), float(y_min), float(x_max), float(y_max)


HARD_MAZE = MazeMap(
    walls=(
        (5, 5, 5, 200),
        (5, 200, 200, 200),
        (200, 200, 200, 5),
        (200, 5, 5, 5),
        (5, 49, 57, 53),
        (56, 54, 56, 157),
        (57, 106, 158, 162),
        (77, 200, 108, 164),
        (5, 80, 33, 121),
        (200, 146, 87, 91),
        (56, 55, 133, 30),
    ),
    start=(36, 184),
    start_heading=0,
    goal=(31, 20),
)
"""Lehman & Stanley's hard maze (``hard_maze.txt`` of the original code)."""

MEDIUM_MAZE = MazeMap(
    walls=(
        (5, 5, 295, 5),
        (295, 5, 295, 135),
        (295, 135, 5, 135),
        (5, 135, 5, 5),
        (241, 135, 58, 65),
        (114, 5, 73, 42),
        (130, 91, 107, 46),
        (196, 5, 139, 51),
        (219, 125, 182, 63),
        (267, 5, 214, 63),
        (271, 135, 237, 88),
    ),
    start=(30, 22),
    start_heading=0,
    goal=(270, 100),
)
"""Lehman & Stanley's medium maze (``medium_maze.txt`` of the original code)."""

MAPS: dict[str, MazeMap] = {"hard": HARD_MAZE, "medium": MEDIUM_MAZE}
"""Maps by env id (``env.id`` when ``env.kind`` is ``maze``)."""

# The hard maze's geometry, for plots.
WALLS = HARD_MAZE.walls
START = HARD_MAZE.start
GOAL = HARD_MAZE.goal
BOUNDS = HARD_MAZE.bounds


def maze_map(name: str) -> MazeMap:
    """The map called ``name`` (``"hard"`` or ``"medium"``).

    Raises:
        ValueError: unknown name; the message lists the valid ones.
    """
    if name not in MAPS:
        raise ValueError(f"unknown maze {name!r}; valid mazes: {', '.join(MAPS)}")
    return MAPS[name]


def draw(maze: MazeMap, states: np.ndarray, scale: int = 2) -> np.ndarray:
    """RGB pictures of robots in ``maze``: walls black, goal red, robot blue with its heading.

    Args:
        states: float ``[k, 5]`` rows of ``MazeEnv.state``.
        scale: pixels per maze unit.

    Returns:
        uint8 ``[k, height, width, 3]``, y growing downwards as the original draws the maze.
    """
    x_min, y_min, x_max, y_max = maze.bounds
    # Even sizes: video encoders (H.264 in yuv420p) refuse odd ones.
    height, width = (
        2 * (round(extent * scale) // 2 + 1) for extent in (y_max - y_min, x_max - x_min)
    )
    rows, cols = np.mgrid[0:height, 0:width]
    ys, xs = rows / scale + y_min, cols / scale + x_min
    base = np.full((height, width, 3), 255, np.uint8)
    for x0, y0, x1, y1 in maze.walls:
        t = np.linspace(0, 1, round(np.hypot(x1 - x0, y1 - y0) * scale * 2) + 2)
        r = np.round((y0 + t * (y1 - y0) - y_min) * scale).astype(int)
        c = np.round((x0 + t * (x1 - x0) - x_min) * scale).astype(int)
        for dr, dc in ((0, 0), (0, 1), (1, 0), (1, 1)):
            base[np.clip(r + dr, 0, height - 1), np.clip(c + dc, 0, width - 1)] = 0
    base[np.hypot(xs - maze.goal[0], ys - maze.goal[1]) < 5] = (220, 30, 30)
    frames = np.repeat(base[None], len(states), axis=0)
    for frame, (x, y, heading, _, _) in zip(frames, np.asarray(states, np.float64), strict=True):
        frame[np.hypot(xs - x, ys - y) < ROBOT_RADIUS] = (30, 80, 220)
        t = np.linspace(0, ROBOT_RADIUS, round(ROBOT_RADIUS * scale) + 1)
        r = np.round((y + t * np.sin(np.radians(heading)) - y_min) * scale).astype(int)
        c = np.round((x + t * np.cos(np.radians(heading)) - x_min) * scale).astype(int)
        frame[np.clip(r, 0, height - 1), np.clip(c, 0, width - 1)] = 255
    return frames


class MazeEnv(OpEnv):
    """``num_slots`` robots in one maze behind the batched-env API (module docstring).

    Args:
        env_id: the maze, ``"hard"`` or ``"medium"`` (``MAPS``).
        num_slots: number of independent robots.
        max_episode_steps: episode cutoff in steps (truncation); 0 disables it; None (default)
            is the paper's 400.
        **options: the fields of :class:`MazeParams`.

    Raises:
        ValueError: unknown maze, bad sizes (``num_slots`` at most
            ``neuroevo.core.indices.MAX_SLOTS``) or a bad option.
    """

    params_class = MazeParams
    video_fps = 30.0
    """Steps per second of ``play --video`` (the original has no clock)."""

    def _open(self, env_id: str, max_episode_steps: int | None) -> tf.Tensor:
        self.map = maze_map(env_id)
        self.maze = env_id
        if max_episode_steps is None:
            max_episode_steps = MAX_EPISODE_STEPS
        if max_episode_steps < 0:
            raise ValueError(f"max_episode_steps must be >= 0, got {max_episode_steps}")
        self.max_episode_steps = max_episode_steps
        self._ops = ops.load("maze")
        with tf.init_scope():  # the handle must outlive any tf.function that makes the env
            handle = self._ops.neuroevo_maze_make(
                walls=[float(v) for wall in self.map.walls for v in wall],
                start=[*map(float, self.map.start), float(self.map.start_heading)],
                goal=[float(v) for v in self.map.goal],
                goal_radius=self.options.goal_radius,
                num_slots=self.num_slots,
                max_episode_steps=max_episode_steps,
            )
        self.observation_spec = ObservationSpec((OBSERVATION_SIZE,), tf.float32)
        self.action_spec = ActionSpec(
            discrete=False,
            shape=(2,),
            low=np.zeros(2, np.float32),
            high=np.ones(2, np.float32),
        )
        return handle

    def reset(self, indices: Any, seeds: Any) -> tf.Operation | None:
        """Puts each listed robot at the start, at rest; ``seeds`` are checked, then unused."""
        return self._ops.neuroevo_maze_reset(
            self.handle, self._indices(indices), seed_tensor(seeds)
        )

    def step(self, indices: Any, actions: Any) -> StepResult:
        """Advances each listed robot by one step; ``actions`` float32 ``[k, 2]``."""
        return StepResult(
            *self._ops.neuroevo_maze_step(
                self.handle, self._indices(indices), float_tensor(actions, "actions")
            )
        )

    def observation(self, indices: Any) -> tf.Tensor:
        """float32 ``[k, 11]``: bias, six rangefinders (fractions of 100), four radar sectors."""
        return self._ops.neuroevo_maze_observation(self.handle, self._indices(indices))

    def frames(self, indices: Any) -> tf.Tensor:
        """int64 ``[k]``: steps of each listed slot's current (or last) episode."""
        return self._ops.neuroevo_maze_frames(self.handle, self._indices(indices))

    def flags(self, indices: Any) -> tf.Tensor:
        """int32 ``[k]``: ``NAN_ACTION`` if the slot's current episode ended on a NaN action."""
        return self._ops.neuroevo_maze_flags(self.handle, self._indices(indices))

    def behavior(self, indices: Any) -> tf.Tensor:
        """float32 ``[k, 2]``: each listed robot's current ``(x, y)``."""
        return self.position(indices)

    def position(self, indices: Any) -> tf.Tensor:
        """float32 ``[k, 2]``: each listed robot's current ``(x, y)``."""
        return self._ops.neuroevo_maze_position(self.handle, self._indices(indices))

    def state(self, indices: Any) -> tf.Tensor:
        """float64 ``[k, 5]``: ``(x, y, heading in degrees, speed, angular velocity)``."""
        return self._ops.neuroevo_maze_state(self.handle, self._indices(indices))

    def screen(self, indices: Any, rgb: bool = False) -> tf.Tensor:
        """Pictures of the listed robots in the maze (``draw``), for ``play --video``.

        Returns:
            uint8 ``[k, height, width, 3]`` when ``rgb``, else ``[k, height, width]`` gray.
        """
        frames = draw(self.map, self.state(indices).numpy())
        if not rgb:
            frames = frames.mean(axis=-1).round().astype(np.uint8)
        return tf.constant(frames)

    def __repr__(self) -> str:
        return f"MazeEnv({self.maze!r}, num_slots={self.num_slots})"
