"""A saved policy, loaded and played: an elite (``elite.npz`` / ``best.npz``) or an Uber seed
list becomes the config's env and model with the weights, observation statistics and reference
batch it was trained with.

Used by ``python -m neuroevo.play``, the paper test (:mod:`neuroevo.run.paper_evaluation`) and the
trainer's tests: episodes run through the same evaluator as training, so a replayed return
equals the return training saw for the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from neuroevo.config.schema import Config
from neuroevo.run.build import (
    build_env,
    build_model,
    normalizes_observations,
    uses_reference_batch,
)
from neuroevo.run.run_dir import RunDir
from neuroevo.run.video import VideoFile

if TYPE_CHECKING:
    from neuroevo.genomes.genome import GAGenome

REPLAY_SLOTS = 32
"""Most env and model slots a replay uses; more episodes queue for a free slot (each model
slot holds a copy of the weights, so a slot per episode would not fit a large network)."""


@dataclass(frozen=True)
class Policy:
    """A saved elite: everything needed to act as it did in training.

    Attributes:
        weights: float32 [P], the flat weights.
        obs_stats: ``(mean, std)`` of the observation normalisation, if the model has one.
        reference_batch: The virtual-batch-norm reference observations, if the model uses them.
    """

    weights: np.ndarray
    obs_stats: tuple[np.ndarray, np.ndarray] | None = None
    reference_batch: np.ndarray | None = None


def short_genome(genome: object) -> str:
    """A genome for a one-line message: long seed chains are summarised."""
    from neuroevo.genomes.genome import GAGenome

    if isinstance(genome, GAGenome) and len(genome.mutations) > 3:
        return f"GAGenome(init_index={genome.init_index}, {len(genome.mutations)} mutations)"
    return str(genome)


def load_policy(run: RunDir, best: bool = False) -> tuple[dict, Policy]:
    """Reads ``elite.npz`` (or ``best.npz``) of a run: ``(genome record, policy)``."""
    genome, weights = run.load_elite(best)
    policy = Policy(weights, run.load_elite_obs_stats(best), run.load_elite_reference_batch(best))
    return genome, policy


def build_policy(cfg: Config, env, policy: Policy):
    """The config's model for ``env``, with the elite's normalisation state applied.

    Raises:
        ValueError: see :func:`apply_policy`.
    """
    model = build_model(cfg, env)
    apply_policy(cfg, model, policy)
    return model


def apply_policy(cfg: Config, model, policy: Policy) -> None:
    """Gives ``model`` the elite's normalisation state (observation statistics, reference
    batch) after checking that its weights fit.

    Raises:
        ValueError: The elite's weights do not fit the model (another run's file), or the
            model normalises observations or uses virtual batch norm but the saved elite
            lacks the statistics or the reference batch.
    """
    weights = np.asarray(policy.weights)
    if weights.shape != (model.num_params,):
        raise ValueError(
            f"the elite holds weights of shape {weights.shape} but the run's model "
            f"({cfg.model.name} on {cfg.env.kind} '{cfg.env.id}') has {model.num_params:,} "
            "parameters: the elite file belongs to another run or config"
        )
    stale = "(written by an older neuroevo?): resume the run for one generation to refresh it"
    if normalizes_observations(model):
        if policy.obs_stats is None:
            raise ValueError(
                f"the model normalises observations but the elite has no statistics {stale}"
            )
        model.set_obs_stats(*policy.obs_stats)
    if uses_reference_batch(model):
        if policy.reference_batch is None:
            raise ValueError(
                f"the model uses virtual batch norm but the elite has no reference batch {stale}"
            )
        model.set_reference_batch(policy.reference_batch)


class ElitePlayer:
    """Plays saved elites in the config's env and model, built once: the trainer tests its
    elite every few generations, and building an env, a model and an evaluator (tracing its
    graph) costs seconds each time. Use as a context manager, or call :meth:`close`.

    Args:
        cfg: the config whose env and model play (with the test's no-op starts and cutoff).
        slots: env and model slots (at most :data:`REPLAY_SLOTS` are useful).
    """

    def __init__(self, cfg: Config, slots: int = REPLAY_SLOTS) -> None:
        self._cfg = cfg
        self._env = build_env(cfg, num_slots=min(max(slots, 1), REPLAY_SLOTS))
        self._weights: np.ndarray | None = None
        self._evaluator = None  # built (its graph traced) once a policy has set the model up
        try:
            self._model = build_model(cfg, self._env)
        except BaseException:
            self._env.close()
            raise

    def _decode(self, genomes) -> np.ndarray:
        return np.broadcast_to(self._weights, (len(genomes), len(self._weights)))

    def returns(self, policy: Policy, seeds: np.ndarray) -> np.ndarray:
        """float64 ``[len(seeds)]``: one episode of ``policy`` per seed.

        Raises:
            ValueError: see :func:`apply_policy`.
        """
        from neuroevo.evaluation import EvalRequest, Evaluator

        apply_policy(self._cfg, self._model, policy)
        self._weights = np.asarray(policy.weights, np.float32)
        if self._evaluator is None:
            self._evaluator = Evaluator(self._env, self._model, self._decode)
        seeds = np.asarray(seeds, np.int64)
        results = self._evaluator.evaluate(EvalRequest([0] * len(seeds), seeds.reshape(-1, 1)))
        return results.returns[:, 0]

    def close(self) -> None:
        if self._evaluator is not None:
            self._evaluator.close()
        self._env.close()

    def __enter__(self) -> ElitePlayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def evaluate_elite(cfg: Config, policy: Policy, seeds: np.ndarray) -> np.ndarray:
    """Returns float64 ``[len(seeds)]``: one episode of the policy per seed, in the config's
    env (at most :data:`REPLAY_SLOTS` at a time)."""
    with ElitePlayer(cfg, len(seeds)) as player:
        return player.returns(policy, seeds)


def check_records_video(cfg: Config) -> None:
    """Raises ``ValueError`` before any episode runs when the run's env has no frames to film."""
    from neuroevo.envs import ENV_KINDS

    if not hasattr(ENV_KINDS[cfg.env.kind], "screen"):  # the RecordsVideo method
        raise ValueError(f"--video needs an env with frames (Atari, maze); {cfg.env.kind} has none")


def record_video(cfg: Config, policy: Policy, seed: int, path: Path) -> tuple[float, int]:
    """Plays one episode in a single slot and writes its RGB frames to ``path`` (its
    directory is created if needed).

    Returns:
        The episode's return and the number of video frames written.

    Raises:
        neuroevo.run.video.VideoError: The video could not be written (the partial file is
            removed); a ``ValueError``.
    """
    import tensorflow as tf

    check_records_video(cfg)
    env = build_env(cfg, num_slots=1)
    total, frames = 0.0, 0
    try:
        model = build_policy(cfg, env, policy)
        slot = tf.constant([0], tf.int32)
        model.load(slot, tf.constant(policy.weights[None, :], tf.float32))
        env.reset(slot, tf.constant([seed], tf.int64))
        model.reset_state(slot)
        fps = max(1, round(env.video_fps))
        path.parent.mkdir(parents=True, exist_ok=True)
        with VideoFile(path, fps) as video:
            video.append(env.screen(slot, rgb=True)[0].numpy())
            done = False
            while not done:
                action = model.act(slot, env.observation(slot))
                reward, terminated, truncated = env.step(slot, action)
                total += float(reward[0])
                done = bool(terminated[0] or truncated[0])
                video.append(env.screen(slot, rgb=True)[0].numpy())
                frames += 1
    finally:
        env.close()
    return total, frames + 1


def uber_config(
    game: str,
    model: str,
    noop_max: int = 30,
    max_episode_steps: int | None = None,
) -> Config:
    """The config that replays Uber genomes: ``game`` with Uber's Atari pipeline, ``model``
    (a neuroevo model name) and the no-op starts and cutoff (None: Uber's 100,000 steps)."""
    from neuroevo.config.schema import config_from_dict
    from neuroevo.envs.atari import rom_path

    rom_path(game)  # an unknown game fails here, with suggestions, before any work
    env = {"kind": "atari", "id": game, "max_episode_steps": max_episode_steps}
    env["atari"] = {"preprocessing": "uber", "noop_max": noop_max}
    return config_from_dict({"env": env, "model": {"name": model}, "budget": {"generations": 1}})


def load_uber_policy(
    path: Path,
    game: str | None = None,
    uber_model: str | None = None,
    noop_max: int = 30,
    max_episode_steps: int | None = None,
) -> tuple[Config, GAGenome, Policy]:
    """Reads an Uber seed list and decodes it: ``(replay config, genome, policy)``.

    ``game`` and ``uber_model`` (Uber's network class) default to the file's.

    Raises:
        ValueError: A bad file, no game named, an unknown game or a seed outside the table.
    """
    from neuroevo.compat.uber import (
        UBER_MODELS,
        UberGenomeDecoder,
        load_uber_genome,
        uber_noise_table,
    )

    loaded = load_uber_genome(path)
    game = game or loaded.game
    if game is None:
        raise ValueError(f"{path} names no game: pass --game (e.g. --game frostbite)")
    model = UBER_MODELS[uber_model] if uber_model else loaded.model or "nature_large"
    cfg = uber_config(game, model, noop_max, max_episode_steps)
    env = build_env(cfg, num_slots=1)
    try:
        decoder = UberGenomeDecoder(build_model(cfg, env), uber_noise_table())
    finally:
        env.close()
    return cfg, loaded.genome, Policy(decoder.decode(loaded.genome))
