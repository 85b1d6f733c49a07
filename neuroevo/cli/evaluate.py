"""``python -m neuroevo.evaluate RUN_DIR [--episodes 200] [--noop-max 30] [--max-steps N]``.

Scores a run's best validated elite (``best.npz``; ``--current`` for ``elite.npz``) the way
the papers reported results: Such et al. 2017 play the elite for 200 episodes, each starting
with up to 30 random no-ops. Prints mean / median / std / min / max and writes them, with
every return, to ``test.json`` in the run directory. The trainer runs the same test every
``test.every_generations`` and at the end (``test.at_end``).

``python -m neuroevo.evaluate --uber-genome FILE --game frostbite --episodes 30`` scores a seed
list of Uber's deep-neuroevolution code the same way, with Uber's noise table, network and
Atari pipeline (see ``neuroevo.play``); nothing is written.

The test itself is :mod:`neuroevo.run.paper_evaluation`; this module is its command line. Bad input
prints one line and exits 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from neuroevo.cli.common import Parser, add_allow_imports, quiet_tensorflow_start_up, run_command
from neuroevo.cli.play import add_uber_arguments, check_run_or_uber
from neuroevo.core.resources import check_start_up_address_space
from neuroevo.run.preflight import check_episodes
from neuroevo.run.run_dir import RunDir


def check_test_arguments(args: argparse.Namespace) -> None:
    """Raises ``ValueError`` for ``--episodes`` below 1, a negative ``--noop-max`` or a
    ``--max-steps`` below 1 (before TensorFlow is imported)."""
    for name, low in (("episodes", 1), ("noop_max", 0), ("max_steps", 1)):
        value = getattr(args, name)
        if value is not None and value < low:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} must be >= {low}, got {value}")


def main_uber(args: argparse.Namespace) -> int:
    """``--uber-genome``: plays the seed list for ``--episodes`` test episodes and prints the
    score and every return (30 no-ops at most unless ``--noop-max``, Uber's cutoff unless
    ``--max-steps``)."""
    check_test_arguments(args)
    check_episodes(args.episodes, "a test", "lower --episodes")
    # Imported once the arguments are known good: they import TensorFlow.
    from neuroevo.run.paper_evaluation import episode_seeds_for_test, score
    from neuroevo.run.policy import evaluate_elite, load_uber_policy, short_genome

    noop_max = 30 if args.noop_max is None else args.noop_max
    cfg, genome, policy = load_uber_policy(
        args.uber_genome, args.game, args.uber_model, noop_max, args.max_steps
    )
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
    cfg = run.saved_config(allow_imports=args.allow_imports)
    from neuroevo.run.paper_evaluation import run_test  # imports TensorFlow: after the checks

    result = run_test(run, cfg, args.episodes, args.noop_max, args.max_steps, args.current)
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
    add_allow_imports(parser, "RUN_DIR")
    add_uber_arguments(parser)
    args = parser.parse_args(argv)
    check_run_or_uber(parser, args)

    def command() -> int:
        check_start_up_address_space()
        return (main_uber if args.uber_genome is not None else main_run)(args)

    return run_command(command)
