"""``python -m neuroevo.play RUN_DIR [--episodes N] [--video out.mp4] [--seed S]``.

Replays a run's elite (``elite.npz``, written every generation) in the run's own env: prints
each episode's return and, with ``--video``, writes the first episode's real game frames (Atari
RGB screens at 60 / frame_skip frames per second; the maze drawn at 30 steps per second).
Episodes run through the same evaluator as training, so a replayed return equals the return
training saw for the same seed.

``python -m neuroevo.play --uber-genome FILE --game frostbite`` replays a seed list of Uber's
deep-neuroevolution code instead (``neuroevo.compat.uber``): Uber's noise table (generated
once, ~1 GB), its network (``--uber-model``, default the file's or LargeModel) and its Atari
pipeline (``env.atari.preprocessing: uber``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from neuroevo import limits
from neuroevo.cli import Parser, output_file, quiet_tensorflow_start_up, run_command
from neuroevo.config import Config, load_config
from neuroevo.extras import require
from neuroevo.resources import check_start_up_address_space
from neuroevo.runlog import RunDir
from neuroevo.video import VIDEO_SUFFIXES, VideoFile

if TYPE_CHECKING:
    from neuroevo.genome import GAGenome

MAX_SEED = 2**63 - 1
"""Largest episode seed (seeds are int64)."""

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
    from neuroevo.genome import GAGenome

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
        ValueError: The elite's weights do not fit the model (another run's file), or the
            model normalises observations or uses virtual batch norm but the saved elite
            lacks the statistics or the reference batch.
    """
    from neuroevo.trainer import build_model, normalizes_observations, uses_reference_batch

    model = build_model(cfg, env)
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
    return model


def evaluate_elite(cfg: Config, policy: Policy, seeds: np.ndarray) -> np.ndarray:
    """Returns float64 ``[len(seeds)]``: one episode of the policy per seed, in the config's
    env (at most :data:`REPLAY_SLOTS` at a time)."""
    from neuroevo.evaluation import EvalRequest, Evaluator
    from neuroevo.trainer import build_env

    env = build_env(cfg, num_slots=min(len(seeds), REPLAY_SLOTS))
    model = build_policy(cfg, env, policy)
    weights = policy.weights
    with Evaluator(env, model, lambda genomes: np.stack([weights] * len(genomes))) as evaluator:
        results = evaluator.evaluate(EvalRequest([0] * len(seeds), seeds.reshape(-1, 1)))
    env.close()
    return results.returns[:, 0]


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
        neuroevo.video.VideoError: The video could not be written (the partial file is
            removed); a ``ValueError``.
    """
    import tensorflow as tf

    from neuroevo.trainer import build_env

    check_records_video(cfg)
    env = build_env(cfg, num_slots=1)
    model = build_policy(cfg, env, policy)
    slot = tf.constant([0], tf.int32)
    model.load(slot, tf.constant(policy.weights[None, :], tf.float32))
    env.reset(slot, tf.constant([seed], tf.int64))
    fps = max(1, round(env.video_fps))
    total, frames = 0.0, 0
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
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
    from neuroevo.config import config_from_dict
    from neuroevo.envs.atari import rom_path

    rom_path(game)  # an unknown game fails here, with suggestions, before any work
    env = {"kind": "atari", "id": game, "max_episode_steps": max_episode_steps}
    env["atari"] = {"preprocessing": "uber", "noop_max": noop_max}
    return config_from_dict({"env": env, "model": {"name": model}, "budget": {"generations": 1}})


def add_uber_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--uber-genome`` options shared by ``play`` and ``evaluate``."""
    from neuroevo.compat.uber import UBER_MODELS

    group = parser.add_argument_group("Uber genomes (instead of RUN_DIR)")
    group.add_argument(
        "--uber-genome",
        type=Path,
        help="seed list of Uber's deep-neuroevolution code (JSON or Python literal)",
    )
    group.add_argument("--game", help="ale-py game id (default: the file's 'game')")
    group.add_argument(
        "--uber-model",
        choices=sorted(UBER_MODELS),
        help="Uber's network class (default: the file's 'model', else LargeModel)",
    )


def load_uber_policy(
    args: argparse.Namespace, noop_max: int = 30, max_episode_steps: int | None = None
) -> tuple[Config, GAGenome, Policy]:
    """Reads ``--uber-genome`` and decodes it: ``(replay config, genome, policy)``.

    Raises:
        ValueError: A bad file, no game named, an unknown game or a seed outside the table.
    """
    from neuroevo.compat.uber import (
        UBER_MODELS,
        UberGenomeDecoder,
        load_uber_genome,
        uber_noise_table,
    )
    from neuroevo.trainer import build_env, build_model

    loaded = load_uber_genome(args.uber_genome)
    game = args.game or loaded.game
    if game is None:
        raise ValueError(f"{args.uber_genome} names no game: pass --game (e.g. --game frostbite)")
    model = UBER_MODELS[args.uber_model] if args.uber_model else loaded.model or "nature_large"
    cfg = uber_config(game, model, noop_max, max_episode_steps)
    env = build_env(cfg, num_slots=1)
    decoder = UberGenomeDecoder(build_model(cfg, env), uber_noise_table())
    env.close()
    return cfg, loaded.genome, Policy(decoder.decode(loaded.genome))


def check_run_or_uber(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exactly one of RUN_DIR and ``--uber-genome``; the Uber options only with the latter."""
    if (args.run_dir is None) == (args.uber_genome is None):
        parser.error("give either RUN_DIR or --uber-genome FILE")
    if args.uber_genome is None and (args.game or args.uber_model):
        parser.error("--game and --uber-model go with --uber-genome")


def main(argv: list[str] | None = None) -> int:
    quiet_tensorflow_start_up()
    parser = Parser(prog="python -m neuroevo.play", description=__doc__)
    parser.add_argument("run_dir", type=Path, nargs="?")
    parser.add_argument("--episodes", type=int, default=5, help="episodes to play (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    parser.add_argument(
        "--video",
        type=Path,
        help="write the first episode as a video (.mp4, .mkv, .mov or .avi; directories are "
        "created)",
    )
    add_uber_arguments(parser)
    args = parser.parse_args(argv)
    check_run_or_uber(parser, args)
    return run_command(lambda: _play(args))


def _play(args: argparse.Namespace) -> int:
    """The command: plays the elite's (or an Uber genome's) episodes, prints their returns,
    records the video."""
    check_start_up_address_space()
    if not 1 <= args.episodes <= limits.MAX_SLOTS:  # every episode runs in its own slot
        raise ValueError(f"--episodes must be in [1, {limits.MAX_SLOTS}], got {args.episodes}")
    last_seed = MAX_SEED - args.episodes + 1
    if not 0 <= args.seed <= last_seed:  # episode seeds are int64
        raise ValueError(
            f"--seed must be in [0, {last_seed}] (2**63 - --episodes), got {args.seed}"
        )
    if args.video is not None:  # checked before any episode runs
        require("video", "--video")
        args.video = output_file(args.video, "--video", VIDEO_SUFFIXES)
    if args.uber_genome is not None:
        cfg, genome, policy = load_uber_policy(args)
    else:
        run = RunDir(args.run_dir)
        if not run.elite_path.is_file():
            raise FileNotFoundError(
                f"{run.elite_path} not found: the run has not finished a generation yet"
            )
        cfg = load_config(run.config_path)
        genome, policy = load_policy(run)
    if args.video is not None:  # checked before any episode runs
        check_records_video(cfg)
    seeds = np.arange(args.seed, args.seed + args.episodes, dtype=np.int64)
    returns = evaluate_elite(cfg, policy, seeds)
    for seed, value in zip(seeds, returns, strict=True):
        print(f"episode seed {seed}: return {value:g}")
    print(
        f"mean return {returns.mean():g}, median {np.median(returns):g}, max {returns.max():g} "
        f"over {len(returns)} episodes (elite: {short_genome(genome)})"
    )
    if args.video is not None:
        total, frames = record_video(cfg, policy, int(seeds[0]), args.video)
        print(f"wrote {args.video}: {frames} frames, return {total:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
