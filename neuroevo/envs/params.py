"""The env backends' options: their ``env.<kind>`` config sections, declared once.

Kept apart from the backends (which import TensorFlow, ale-py, MuJoCo) so that a config is
loaded and validated without importing any of them; each backend reads its class from here.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, ClassVar

from neuroevo.core.limits import MAX_MUJOCO_FRAME_SKIP, MAX_THREADS
from neuroevo.core.params import ParamError, Params, check, check_choice

__all__ = [
    "MUJOCO_ASSETS",
    "PREPROCESSINGS",
    "SCREEN_SHAPE",
    "AtariParams",
    "EnvParams",
    "GymParams",
    "MazeParams",
    "MujocoParams",
    "resolve_model_xml",
]

SCREEN_SHAPE = (210, 160)  # raw ALE screen, rows x columns
MUJOCO_ASSETS = Path(__file__).parent / "assets"
"""MJCF models shipped with neuroevo (``env.mujoco.model_xml`` may name them by file name)."""
PREPROCESSINGS = ("gymnasium", "uber")
"""Observation pipelines of the Atari op: DQN's as gymnasium implements it, or Uber's GPU code's."""


@dataclasses.dataclass(frozen=True)
class EnvParams(Params):
    """Base of every env backend's options: besides its config keys, what the backend gives,
    read by the config to check a model against the env before anything is built."""

    discrete_actions: ClassVar[bool | None] = None
    """Whether every env of this backend has discrete actions; None when it depends on the id."""
    image_observations: ClassVar[bool | None] = None
    """Whether observations are images ``[h, w, c]`` (else vectors); None: depends on the id."""
    noop_starts: ClassVar[bool] = False
    """Whether episodes start with up to ``noop_max`` random no-ops (a field of the options),
    which the papers' test sets from ``test.noop_max``."""

    def imports(self, env_id: str) -> dict[str, str]:
        """The Python modules making this env imports (their code runs), by the key naming
        each: ``"id"`` for ``env.id``, else a field of these options. None by default."""
        return {}


@dataclasses.dataclass(frozen=True)
class AtariParams(EnvParams):
    """Atari preprocessing, in Machado et al. (2018) terms; the ``env.atari`` config section.

    Attributes:
        frame_skip: emulator frames per agent step (action repeat), in [1, 64].
        noop_max: no-op starts are uniform in [1, noop_max] frames; 0 disables them.
        sticky_action_prob: ALE's ``repeat_action_probability`` in [0, 1] (0.25 in
            Machado et al. 2018; 0 = deterministic).
        fire_reset: press FIRE for one agent step after the no-ops, for games that wait for it.
        terminal_on_life_loss: end the episode (terminated) when a life is lost.
        full_action_space: all 18 joystick actions instead of the game's minimal set.
        screen_size: observation height and width, in [1, 160].
        stack: frames per observation, in [1, 64].
        preprocessing: ``"gymnasium"`` (uint8 observations as described above) or
            ``"uber"`` (float32 observations as Uber's deep-neuroevolution GPU code makes
            them, for replaying its genomes; needs ``fire_reset: false``).
    """

    discrete_actions = True
    image_observations = True
    noop_starts = True

    frame_skip: int = 4
    noop_max: int = 30
    sticky_action_prob: float = 0.0
    fire_reset: bool = False
    terminal_on_life_loss: bool = False
    full_action_space: bool = False
    screen_size: int = 84
    stack: int = 4
    preprocessing: str = "gymnasium"

    def _validate(self) -> None:
        check_choice(self.preprocessing, PREPROCESSINGS, "preprocessing")
        check(
            not (self.preprocessing == "uber" and self.fire_reset),
            "fire_reset",
            self.fire_reset,
            "false with preprocessing: uber (its reset presses FIRE itself, as Uber's does)",
        )
        check(1 <= self.frame_skip <= 64, "frame_skip", self.frame_skip, "in [1, 64]")
        check(0 <= self.noop_max <= 100_000, "noop_max", self.noop_max, "in [0, 100000]")
        check(
            0.0 <= self.sticky_action_prob <= 1.0,
            "sticky_action_prob",
            self.sticky_action_prob,
            "in [0, 1]",
        )
        check(
            1 <= self.screen_size <= SCREEN_SHAPE[1],
            "screen_size",
            self.screen_size,
            f"in [1, {SCREEN_SHAPE[1]}]",
        )
        check(1 <= self.stack <= 64, "stack", self.stack, "in [1, 64]")


def resolve_model_xml(path: str) -> Path:
    """``path`` as given, or relative to the working directory, else a shipped model's file.

    Raises:
        ValueError: no readable file there; the message lists the shipped models.
    """
    candidates = [Path(path).expanduser()]
    if not candidates[0].is_absolute():
        candidates.append(MUJOCO_ASSETS / path)
    for candidate in candidates:
        if candidate.is_file():
            try:
                with open(candidate, "rb"):
                    return candidate.resolve()
            except OSError as exc:
                raise ValueError(
                    f"cannot read the MuJoCo model {str(candidate)!r}: {exc}"
                ) from None
    shipped = ", ".join(sorted(p.name for p in MUJOCO_ASSETS.glob("*.xml")))
    raise ValueError(
        f"no MuJoCo model file {path!r} (looked in the working directory {Path.cwd()} and among "
        f"the shipped models: {shipped})"
    )


@dataclasses.dataclass(frozen=True)
class MujocoParams(EnvParams):
    """Task options; the ``env.mujoco`` config section. None keeps the task's v5 default.

    Attributes:
        frame_skip: physics steps per agent step.
        reset_noise_scale: scale of the random perturbation of the initial state.
        terminate_when_unhealthy: end the episode when the robot falls (gymnasium's default).
        model_xml: an MJCF file to simulate instead of the task's own (module docstring);
            null keeps gymnasium's.
    """

    discrete_actions = False
    image_observations = False

    frame_skip: int | None = None
    reset_noise_scale: float | None = None
    terminate_when_unhealthy: bool = True
    model_xml: str | None = None

    def _validate(self) -> None:
        check(
            self.frame_skip is None or 1 <= self.frame_skip <= MAX_MUJOCO_FRAME_SKIP,
            "frame_skip",
            self.frame_skip,
            f"in [1, {MAX_MUJOCO_FRAME_SKIP}] or null",
        )
        check(
            self.reset_noise_scale is None or self.reset_noise_scale >= 0,
            "reset_noise_scale",
            self.reset_noise_scale,
            ">= 0 or null",
        )
        if self.model_xml is not None:
            try:
                resolve_model_xml(self.model_xml)
            except ValueError as exc:
                raise ParamError(str(exc), "model_xml") from None


@dataclasses.dataclass(frozen=True)
class GymParams(EnvParams):
    """Adapter options; the ``env.gym`` config section.

    Attributes:
        threads: worker threads that step the listed slots (1 steps them on the caller).
        behavior: ``"module:function"`` computing a slot's behaviour characterisation from
            its latest raw observation and info (``function(observation, info)`` returns a
            fixed-length float vector); null: the env provides none.
        make_kwargs: keyword arguments of ``gymnasium.make`` (e.g. ``{continuous: true}``
            for ``LunarLander-v3``); only with a registered id.
    """

    threads: int = 2
    behavior: str | None = None
    make_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    def imports(self, env_id: str) -> dict[str, str]:
        """``gymnasium.make`` imports the module of an id ``module:Name-v0``; the behaviour
        function's module is imported to call it."""
        found = {}
        module, colon, _ = env_id.partition(":")
        if colon:
            found["id"] = module
        if self.behavior is not None:
            found["behavior"] = self.behavior.partition(":")[0]
        return found

    def _validate(self) -> None:
        check(1 <= self.threads <= MAX_THREADS, "threads", self.threads, f"in [1, {MAX_THREADS}]")
        check(
            self.behavior is None or _BEHAVIOR_PATH.fullmatch(self.behavior) is not None,
            "behavior",
            self.behavior,
            "'module:function' (e.g. 'my_package.bcs:final_position') or null",
        )


_BEHAVIOR_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


@dataclasses.dataclass(frozen=True)
class MazeParams(EnvParams):
    """Task options; the ``env.maze`` config section.

    Attributes:
        goal_radius: an episode ends (terminated) when the robot's centre is closer than this
            to the goal (5 in the original).
    """

    discrete_actions = False
    image_observations = False

    goal_radius: float = 5.0

    def _validate(self) -> None:
        check(self.goal_radius > 0, "goal_radius", self.goal_radius, "> 0")
