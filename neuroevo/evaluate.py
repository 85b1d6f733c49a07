"""``python -m neuroevo.evaluate RUN_DIR [--episodes 200] [--noop-max 30] [--max-steps N]``.

Scores a run's best validated elite (``best.npz``; ``--current`` for ``elite.npz``) the way
the papers reported results: Such et al. 2017 play the elite for 200 episodes, each starting
with up to 30 random no-ops. Prints mean / median / std / min / max and writes them, with
every return, to ``test.json`` in the run directory. The trainer runs the same test every
``test.every_generations`` and at the end (``test.at_end``).

``python -m neuroevo.evaluate --uber-genome FILE --game frostbite --episodes 30`` scores a seed
list of Uber's deep-neuroevolution code the same way, with Uber's noise table, network and
Atari pipeline (see ``neuroevo.play``); nothing is written.

Test episodes have their own seeds (from the run seed, never used by training) and run in a
separate env, so testing never changes the search. Bad input prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from neuroevo.cli import Parser, quiet_tensorflow_start_up, run_command
from neuroevo.config import Config, ConfigError, apply_overrides, load_config
from neuroevo.play import (
    add_uber_arguments,
    check_run_or_uber,
    evaluate_elite,
    load_policy,
    load_uber_policy,
    short_genome,
)
from neuroevo.preflight import check_episodes
from neuroevo.resources import check_start_up_address_space, check_writable
from neuroevo.runlog import RunDir

TEST_SEED_STREAM = 0x7E57
"""Mixed with the run seed to draw test episode seeds (training uses other streams)."""


def episode_seeds_for_test(run_seed: int, episodes: int) -> np.ndarray:
    """int64 ``[episodes]``: the test episodes' seeds, fixed by the run seed."""
    rng = np.random.default_rng([run_seed, TEST_SEED_STREAM])
    return rng.integers(0, 2**31, size=episodes, dtype=np.int64)


def config_for_test(cfg: Config, noop_max: int | None, max_episode_steps: int | None) -> Config:
    """``cfg`` with the test's no-op starts (Atari only) and episode cutoff.

    Raises:
        ConfigError: ``noop_max`` given for an env without no-op starts, or a bad value.
    """
    overrides = [
        f"env.max_episode_steps={'null' if max_episode_steps is None else max_episode_steps}"
    ]
    if noop_max is not None:
        if cfg.env.kind != "atari":
            raise ConfigError(f"--noop-max applies to Atari only; this run's env is {cfg.env.kind}")
        overrides.append(f"env.atari.noop_max={noop_max}")
    return apply_overrides(cfg, overrides)


def score(returns: np.ndarray) -> dict[str, float]:
    """Mean, median, std, min and max of the test returns."""
    return {
        "mean": float(np.mean(returns)),
        "median": float(np.median(returns)),
        "std": float(np.std(returns)),
        "min": float(np.min(returns)),
        "max": float(np.max(returns)),
    }


def run_test(
    run: RunDir,
    cfg: Config,
    episodes: int,
    noop_max: int | None,
    max_episode_steps: int | None,
    current: bool = False,
) -> dict[str, Any]:
    """Plays the run's best (or current) elite for ``episodes`` test episodes.

    Writes the result to ``run.test_path`` (atomically) and returns it: the score
    (:func:`score`), the settings, the elite's genome record and every return.

    Raises:
        FileNotFoundError: The run has no saved elite yet.
        ValueError: Bad settings, an elite that does not fit the model or lacks its
            normalisation state, or a ``test.json`` that cannot be written (checked before
            any episode is played).
    """
    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")
    check_test_writable(run)
    check_episodes(episodes, "a test", "lower --episodes (or test.episodes)")
    tested = config_for_test(cfg, noop_max, max_episode_steps)
    genome, policy = load_policy(run, best=not current)
    returns = evaluate_elite(tested, policy, episode_seeds_for_test(cfg.seed, episodes))
    result = {
        **score(returns),
        "policy": "elite" if current else "best",
        "genome": genome,
        "episodes": episodes,
        "noop_max": tested.env.atari.noop_max if cfg.env.kind == "atari" else None,
        "max_episode_steps": max_episode_steps,
        "returns": returns.tolist(),
    }
    write_test_result(run, result)
    return result


def check_test_writable(run: RunDir) -> None:
    """Refuses, before any episode is played, a run whose ``test.json`` cannot be written (a
    directory of that name, a read-only or immutable run directory).

    Raises:
        ValueError: naming the path and the fix.
    """
    if run.test_path.is_dir():
        raise ValueError(
            f"{run.test_path} is a directory, so the test result cannot be written there; "
            "move it away"
        )
    check_writable(
        run.path, f"the test result {run.test_path}", "copy the run to a writable place first"
    )


def write_test_result(run: RunDir, result: dict[str, Any]) -> None:
    """Replaces ``test.json`` atomically; a failed write leaves no temp file behind.

    Raises:
        OSError: the file cannot be written (a full disk, say); the old one is kept.
    """
    temp = run.test_path.with_name(f".{run.test_path.name}.tmp")
    try:
        temp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        os.replace(temp, run.test_path)
    finally:
        temp.unlink(missing_ok=True)


def check_test_arguments(args: argparse.Namespace) -> None:
    """Raises ``ValueError`` for a negative ``--noop-max`` or a ``--max-steps`` below 1."""
    for name in ("noop_max", "max_steps"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "noop_max" else 1):
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} must be >= {0 if name == 'noop_max' else 1}, got {value}")


def main_uber(args: argparse.Namespace) -> int:
    """``--uber-genome``: plays the seed list for ``--episodes`` test episodes and prints the
    score and every return (30 no-ops at most unless ``--noop-max``, Uber's cutoff unless
    ``--max-steps``)."""
    check_test_arguments(args)
    if args.episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {args.episodes}")
    check_episodes(args.episodes, "a test", "lower --episodes")
    noop_max = 30 if args.noop_max is None else args.noop_max
    cfg, genome, policy = load_uber_policy(args, noop_max, args.max_steps)
    returns = evaluate_elite(cfg, policy, episode_seeds_for_test(0, args.episodes))
    result = score(returns)
    print("returns: " + " ".join(f"{value:g}" for value in returns))
    print(
        f"{short_genome(genome)} on {cfg.env.id} over {args.episodes} episodes: mean "
        f"{result['mean']:g} median {result['median']:g} std {result['std']:g} min "
        f"{result['min']:g} max {result['max']:g}"
    )
    return 0


def main_run(args: argparse.Namespace) -> int:
    """``RUN_DIR``: tests the run's best (or current) elite and writes ``test.json``."""
    run = RunDir(args.run_dir)
    if not run.config_path.is_file():
        raise FileNotFoundError(f"{args.run_dir} holds no run ({run.config_path} is missing)")
    check_test_arguments(args)
    cfg = load_config(run.config_path)
    noop_max = args.noop_max
    if noop_max is None and cfg.env.kind == "atari":
        noop_max = cfg.test.noop_max
    result = run_test(run, cfg, args.episodes, noop_max, args.max_steps, args.current)
    print(
        f"{result['policy']} elite over {result['episodes']} episodes: mean {result['mean']:g} "
        f"median {result['median']:g} std {result['std']:g} min {result['min']:g} "
        f"max {result['max']:g} (written to {run.test_path})"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    quiet_tensorflow_start_up()
    parser = Parser(prog="python -m neuroevo.evaluate", description=__doc__)
    parser.add_argument("run_dir", type=Path, nargs="?")
    parser.add_argument("--episodes", type=int, default=200, help="test episodes (default 200)")
    parser.add_argument(
        "--noop-max",
        type=int,
        help="up to this many random no-ops per episode (Atari; default: the run's test.noop_max)",
    )
    parser.add_argument(
        "--max-steps", type=int, help="episode cutoff in agent steps (default: the env's)"
    )
    parser.add_argument(
        "--current", action="store_true", help="test the current elite, not the best one"
    )
    add_uber_arguments(parser)
    args = parser.parse_args(argv)
    check_run_or_uber(parser, args)

    def command() -> int:
        check_start_up_address_space()
        return (main_uber if args.uber_genome is not None else main_run)(args)

    return run_command(command)


if __name__ == "__main__":
    sys.exit(main())
