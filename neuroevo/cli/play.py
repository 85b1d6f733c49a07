"""``python -m neuroevo.play RUN_DIR [--episodes N] [--video out.mp4] [--seed S]``.

Replays a run's elite (``elite.npz``, written every generation) in the run's own env: prints
each episode's return and, with ``--video``, writes the first episode's real game frames (Atari
RGB screens at 60 / frame_skip frames per second; the maze drawn at 30 steps per second).
Episodes run through the same evaluator as training (:mod:`neuroevo.run.policy`), so a replayed
return equals the return training saw for the same seed. This module is the command line only.

``python -m neuroevo.play --uber-genome FILE --game frostbite`` replays a seed list of Uber's
deep-neuroevolution code instead (``neuroevo.compat.uber``): Uber's noise table (generated
once, ~1 GB), its network (``--uber-model``, default the file's or LargeModel) and its Atari
pipeline (``env.atari.preprocessing: uber``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from neuroevo.cli.common import (
    Parser,
    add_allow_imports,
    output_file,
    quiet_tensorflow_start_up,
    run_command,
)
from neuroevo.core import limits
from neuroevo.core.extras import require
from neuroevo.core.resources import check_start_up_address_space
from neuroevo.run.run_dir import RunDir
from neuroevo.run.video import VIDEO_SUFFIXES

MAX_SEED = 2**63 - 1
"""Largest episode seed (seeds are int64)."""


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
    add_allow_imports(parser, "RUN_DIR")
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
    # Imported once the arguments are known good: they import TensorFlow.
    from neuroevo.run.policy import (
        check_records_video,
        evaluate_elite,
        load_policy,
        load_uber_policy,
        record_video,
        short_genome,
    )

    if args.uber_genome is not None:
        cfg, genome, policy = load_uber_policy(args.uber_genome, args.game, args.uber_model)
    else:
        run = RunDir(args.run_dir)
        if not run.elite_path.is_file():
            raise FileNotFoundError(
                f"{run.elite_path} not found: the run has not finished a generation yet"
            )
        cfg = run.saved_config(allow_imports=args.allow_imports)
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
