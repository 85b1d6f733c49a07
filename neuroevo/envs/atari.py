"""Atari 2600 games as a batched env: ALE emulators stepped inside a TensorFlow C++ op.

``AtariEnv`` owns ``num_slots`` emulators of one game in a TF resource; its methods are TF ops
that take an int32 index vector and touch only those slots, stepping them in parallel on TF's
intra-op CPU threads (``tf.config.threading.set_intra_op_parallelism_threads``). Calls on
disjoint index sets may run from different threads at once.

Preprocessing, in C++, follows DQN (Mnih et al. 2015) as gymnasium's ``AtariPreprocessing`` +
``FrameStackObservation`` implement it, with the names of Machado et al. (2018):

1. **Reset**: every episode starts from the emulator's power-on state (what a freshly loaded
   ``ale_py.ALEInterface`` starts from), so an episode depends only on its seed. The seed
   draws (SplitMix64) ALE's sticky-action seed and a no-op count ``n`` uniform in
   ``[1, noop_max]`` (``0`` when ``noop_max == 0``); ``n`` single-frame NOOPs follow the
   game reset, then, with ``fire_reset``, FIRE held for one agent step (games without FIRE
   skip it).
2. **Action repeat**: an action is repeated ``frame_skip`` frames, each subject to sticky
   actions (ALE's ``repeat_action_probability``); the reward is the raw, unclipped sum.
3. **Max-pool, grayscale, resize**: the last two frames in luminance (ALE's grayscale
   palette) are max-pooled and area-resized to ``screen_size``², bit-identical to
   ``cv2.resize(..., interpolation=cv2.INTER_AREA)`` (for every size but 5 and 10, where
   OpenCV switches to an integer path that differs by at most 1 in a few pixels).
4. **Frame stack**: the last ``stack`` frames, newest last: observations are uint8
   ``[screen_size, screen_size, stack]`` (channels last, unlike gymnasium's ``[stack, H, W]``);
   after a reset every stack entry is the first frame.
5. **Episode end**: ``terminated`` on game over (and on losing a life with
   ``terminal_on_life_loss``), ``truncated`` after ``max_episode_steps`` agent steps
   (``frame_skip`` × that many emulator frames, plus the no-ops). A slot must be reset before
   it is stepped again. As in gymnasium, the step that ends an episode leaves the pooled frames
   as they were, so its observation repeats the previous one.

With ``preprocessing: uber`` the op instead reproduces the pipeline of Uber's deep-neuroevolution
GPU code (Such et al. 2017; ``gym_tensorflow/atari``), so genomes trained there replay here
(``neuroevo.compat.uber``): float32 observations, ALE's NTSC palette in float grayscale
(``rgb / 255 . (0.299, 0.587, 0.114)``), the max of the last two emulated frames, a bilinear
resize with aligned corners (TensorFlow's ``resize_bilinear(align_corners=True)``), a stack
that starts from zeros; after the no-ops (a game over resets the game) games whose action 1 is
FIRE play one agent step of action 1 and one of action 2; every step refreshes the frames; the
default cutoff is 100,000 agent steps (their ``env_default_timestep_cutoff``). Details and what
is still different: docs/REPRODUCE.md.

Emulators are freed when the last reference to the handle goes (``close`` drops this object's;
a ``tf.function`` that captured it keeps its own). The op library links ALE (GPL-2.0) and is
built separately from neuroevo's other ops; see the README's licence section.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

import numpy as np
import tensorflow as tf

from neuroevo.core.indices import int_tensor, seed_tensor
from neuroevo.envs.base import (
    ActionSpec,
    ObservationSpec,
    OpEnv,
    StepResult,
)
from neuroevo.envs.params import PREPROCESSINGS, SCREEN_SHAPE, AtariParams

__all__ = [
    "MAX_EPISODE_FRAMES",
    "PREPROCESSINGS",
    "RAM_BYTES",
    "SCREEN_SHAPE",
    "UBER_MAX_EPISODE_STEPS",
    "AtariEnv",
    "AtariParams",
    "episode_draws",
    "list_games",
    "rom_path",
]

MAX_EPISODE_FRAMES = 108_000
"""Default per-episode cutoff in emulator frames (30 minutes at 60 Hz), as in gymnasium."""
RAM_BYTES = 128
UBER_MAX_EPISODE_STEPS = 100_000
"""Default cutoff with ``preprocessing: uber``: Uber's 100,000 agent steps."""


def list_games() -> list[str]:
    """All game ids the installed ale-py ships a ROM for, e.g. ``["adventure", ..., "zaxxon"]``."""
    from ale_py import roms

    return sorted(roms.get_all_rom_ids())


def rom_path(game: str) -> str:
    """The path of ``game``'s ROM inside the installed ale-py.

    Raises:
        ValueError: ``game`` is not an ale-py game id; the message lists close matches.
    """
    import warnings

    from ale_py import roms

    games = list_games()
    if game not in games:
        folded = {g.replace("_", ""): g for g in games}
        key = game.lower().replace("_", "").replace("-", "").replace(" ", "")
        close = difflib.get_close_matches(key, list(folded), n=5, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(folded[c]) for c in close)}?" if close else ""
        raise ValueError(
            f"unknown Atari game {game!r}{hint} Game ids are ale-py's snake_case ROM names; "
            "neuroevo.envs.atari.list_games() lists all of them."
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = roms.get_rom_path(game)
    if path is None:  # listed but not loadable: an ale-py packaging problem
        raise ValueError(f"ale-py lists {game!r} but has no ROM file for it")
    return str(path)


def _check_int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return int(value)


class AtariEnv(OpEnv):
    """``num_slots`` emulators of one Atari game, stepped by index inside TensorFlow ops.

    Args:
        env_id: ale-py game id, e.g. ``"pong"``, ``"frostbite"`` (see ``list_games()``).
        num_slots: number of emulators; they are created in parallel on TF's CPU threads
            (loading a ROM into an emulator is the slow part of making an env).
        max_episode_steps: truncate episodes after this many agent steps (0: never); None
            (default) is gymnasium's 108,000 emulator frames, 27,000 steps at frame skip 4
            (with ``preprocessing: uber``, Uber's 100,000 steps).
        **options: the fields of :class:`AtariParams` (preprocessing).

    Raises:
        ValueError: an unknown game or an argument out of range (the message names it).
    """

    params_class = AtariParams
    options: AtariParams

    def _open(self, env_id: str, max_episode_steps: int | None) -> tf.Tensor:
        path = rom_path(env_id)
        self.game = env_id
        self._uber = self.options.preprocessing == "uber"
        if max_episode_steps is None:
            gymnasium_steps = MAX_EPISODE_FRAMES // self.options.frame_skip
            max_episode_steps = UBER_MAX_EPISODE_STEPS if self._uber else gymnasium_steps
        self.max_episode_steps = _check_int("max_episode_steps", max_episode_steps, 0, 2**31 - 1)
        self.video_fps = 60 / self.options.frame_skip

        from neuroevo import ops

        self._ops = ops.load("atari")
        # The emulators live outside any tf.function being traced: make them eagerly.
        with tf.init_scope():
            handle = self._ops.neuroevo_atari_make(
                game=env_id,
                rom_path=path,
                num_slots=self.num_slots,
                max_episode_steps=self.max_episode_steps,
                **dataclasses.asdict(self.options),  # every attr, from the one declaration
            )
            action_ids = self._ops.neuroevo_atari_action_set(handle).numpy()
        self.action_ids: tuple[int, ...] = tuple(int(a) for a in action_ids)
        size = self.options.screen_size
        self.observation_spec = ObservationSpec(
            (size, size, self.options.stack), tf.float32 if self._uber else tf.uint8
        )
        self.action_spec = ActionSpec(discrete=True, num_actions=len(self.action_ids))
        return handle

    @property
    def frame_skip(self) -> int:
        """Emulator frames per agent step."""
        return self.options.frame_skip

    @property
    def action_meanings(self) -> list[str]:
        """ALE names of the action indices, e.g. ``["NOOP", "FIRE", "RIGHT", ...]``."""
        from ale_py import Action

        return [Action(a).name for a in self.action_ids]

    def reset(self, indices: Any, seeds: Any) -> tf.Operation | None:
        """Starts a new episode in each listed slot.

        Args:
            indices: int32 ``[k]`` distinct slot ids.
            seeds: int64 ``[k]``; the same seed gives the same episode in any slot or thread.
        """
        return self._ops.neuroevo_atari_reset(
            self.handle, self._indices(indices), seed_tensor(seeds)
        )

    def step(self, indices: Any, actions: Any) -> StepResult:
        """Advances each listed slot by one agent step.

        Args:
            indices: int32 ``[k]`` slot ids, each reset and not yet done.
            actions: int32 ``[k]`` action indices in ``[0, action_spec.num_actions)``.

        Returns:
            ``StepResult(reward float32 [k], terminated bool [k], truncated bool [k])``.
        """
        reward, terminated, truncated = self._ops.neuroevo_atari_step(
            self.handle, self._indices(indices), int_tensor(actions, tf.int32, "actions")
        )
        return StepResult(reward, terminated, truncated)

    def observation(self, indices: Any) -> tf.Tensor:
        """``[k, screen_size, screen_size, stack]``, newest frame last: uint8, or float32 in
        [0, 1] with ``preprocessing: uber``."""
        return self._ops.neuroevo_atari_observation(
            self.handle,
            self._indices(indices),
            screen_size=self.options.screen_size,
            stack=self.options.stack,
            dtype=self.observation_spec.dtype,
        )

    def frames(self, indices: Any) -> tf.Tensor:
        """int64 ``[k]``: emulator frames of each slot's current episode (no-ops included)."""
        return self._ops.neuroevo_atari_frames(self.handle, self._indices(indices))

    def ram(self, indices: Any) -> tf.Tensor:
        """uint8 ``[k, 128]``: console RAM, the usual Atari behaviour characterisation."""
        return self._ops.neuroevo_atari_ram(self.handle, self._indices(indices))

    def behavior(self, indices: Any) -> tf.Tensor:
        """Behaviour characterisation for novelty search: the RAM, uint8 ``[k, 128]``."""
        return self.ram(indices)

    def lives(self, indices: Any) -> tf.Tensor:
        """int32 ``[k]``: lives left, as ALE reports them."""
        return self._ops.neuroevo_atari_lives(self.handle, self._indices(indices))

    def screen(self, indices: Any, rgb: bool = False) -> tf.Tensor:
        """Raw current screens for debugging and parity checks.

        Returns:
            uint8 ``[k, 210, 160]`` grayscale or ``[k, 210, 160, 3]`` RGB, exactly as
            ``ale_py.ALEInterface.getScreenGrayscale`` / ``getScreenRGB`` give them.
        """
        return self._ops.neuroevo_atari_screen(self.handle, self._indices(indices), rgb=bool(rgb))

    def __repr__(self) -> str:
        return (
            f"AtariEnv({self.game!r}, num_slots={self.num_slots}, {self.options}, "
            f"actions={self.action_spec.num_actions})"
        )


def episode_draws(seed: int, noop_max: int) -> tuple[int, int]:
    """What an episode seed decides: ``(ale_seed, noops)``, as the C++ op draws them.

    SplitMix64 seeded with the 64-bit seed: the first output >> 33 seeds ALE's sticky-action
    RNG (ALE's ``random_seed`` setting), the second gives ``1 + out % noop_max`` no-ops.
    Exposed so tests and tools can set up an identical ``ale_py.ALEInterface``.
    """
    mask = (1 << 64) - 1
    state = seed & mask

    def next_value() -> int:
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    ale_seed = next_value() >> 33
    second = next_value()
    return ale_seed, (1 + second % noop_max) if noop_max > 0 else 0
