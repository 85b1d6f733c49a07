"""The env backends' options: their ``env.<kind>`` config sections, declared once.

Kept apart from the backends (which import TensorFlow, ale-py, MuJoCo) so that a config is
loaded and validated without importing any of them; each backend reads its class from here.
"""

from __future__ import annotations

import dataclasses

from neuroevo.params import Params, check

__all__ = ["SCREEN_SHAPE", "AtariOptions", "GymOptions", "MujocoOptions"]

SCREEN_SHAPE = (210, 160)  # raw ALE screen, rows x columns


@dataclasses.dataclass(frozen=True)
class AtariOptions(Params):
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
    """

    frame_skip: int = 4
    noop_max: int = 30
    sticky_action_prob: float = 0.0
    fire_reset: bool = False
    terminal_on_life_loss: bool = False
    full_action_space: bool = False
    screen_size: int = 84
    stack: int = 4

    def _validate(self) -> None:
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


@dataclasses.dataclass(frozen=True)
class MujocoOptions(Params):
    """Task options; the ``env.mujoco`` config section. None keeps the task's v5 default.

    Attributes:
        frame_skip: physics steps per agent step.
        reset_noise_scale: scale of the random perturbation of the initial state.
        terminate_when_unhealthy: end the episode when the robot falls (gymnasium's default).
    """

    frame_skip: int | None = None
    reset_noise_scale: float | None = None
    terminate_when_unhealthy: bool = True

    def _validate(self) -> None:
        check(
            self.frame_skip is None or self.frame_skip >= 1,
            "frame_skip",
            self.frame_skip,
            ">= 1 or null",
        )
        check(
            self.reset_noise_scale is None or self.reset_noise_scale >= 0,
            "reset_noise_scale",
            self.reset_noise_scale,
            ">= 0 or null",
        )


@dataclasses.dataclass(frozen=True)
class GymOptions(Params):
    """Adapter options; the ``env.gym`` config section.

    Attributes:
        threads: worker threads that step the listed slots (1 steps them on the caller).
    """

    threads: int = 2

    def _validate(self) -> None:
        check(self.threads >= 1, "threads", self.threads, ">= 1")
