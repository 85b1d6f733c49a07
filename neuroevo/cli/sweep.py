"""``python -m neuroevo.sweep``: many runs of one config on Ray Tune (docs/SWEEPS.md).

    python -m neuroevo.sweep --config configs/es_hopper.yaml \\
        --grid algorithm.es.sigma=0.02,0.05,0.1 --grid algorithm.es.learning_rate=0.01,0.03 \\
        --seeds 3 --scheduler asha --sweep-dir sweeps/hopper
    python -m neuroevo.sweep --resume sweeps/hopper

Every trial's config is checked against the schema before Ray starts: a bad key or value,
option or sweep directory prints one ``error:`` line and exits with code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from neuroevo.cli.common import Parser, quiet_tensorflow_start_up, run_command

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    from neuroevo.sweeps.space import METRICS, SCHEDULERS

    parser = Parser(
        prog="python -m neuroevo.sweep",
        description="Run a hyperparameter sweep or population-based training of one config on "
        "Ray Tune; each trial is a run directory inside the sweep directory.",
    )
    parser.add_argument("--config", type=Path, help="the base YAML config")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override one value of the base config, as in train; repeatable",
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="sweep KEY over these values (every combination of --grid keys); repeatable",
    )
    for flag, how in (("--uniform", "uniformly"), ("--loguniform", "log-uniformly")):
        parser.add_argument(
            flag,
            action="append",
            default=[],
            metavar="KEY=LO,HI",
            help=f"draw KEY {how} in [LO, HI) for each of --samples; repeatable",
        )
    parser.add_argument("--samples", type=int, default=1, help="draws of the ranges (default 1)")
    parser.add_argument(
        "--seeds", type=int, default=1, help="runs of each configuration on seeds seed, seed+1, ..."
    )
    parser.add_argument("--scheduler", choices=SCHEDULERS, default="fifo")
    parser.add_argument(
        "--metric",
        choices=METRICS,
        default="test_return",
        help="maximised: test_return (the test's mean, else the elite's score) or best_return "
        "(the best episode so far)",
    )
    parser.add_argument(
        "--trials-in-parallel",
        type=int,
        metavar="N",
        help="trials at once (default: one per CPU); each trial's evaluator and TensorFlow "
        "threads get its share of the CPUs",
    )
    parser.add_argument(
        "--perturbation-interval",
        type=float,
        metavar="T",
        help="pbt: exploit and explore every T generations (frames, seconds: what the budget "
        "counts; default a fifth of the budget)",
    )
    parser.add_argument(
        "--address", help="a Ray cluster to run the trials on (auto, host:port); default local"
    )
    parser.add_argument("--sweep-dir", type=Path, help="a new directory for the sweep")
    parser.add_argument("--resume", type=Path, metavar="SWEEP_DIR", help="continue a sweep")
    parser.add_argument("--quiet", action="store_true", help="no progress and no table")
    return parser


def _ranges(texts: list[str], flag: str) -> dict[str, tuple[float, float]]:
    from neuroevo.sweeps.space import parse_range

    ranges = dict(parse_range(text, flag) for text in texts)
    return {key: (r.low, r.high) for key, r in ranges.items()}


def _run(args: argparse.Namespace) -> int:
    from neuroevo.config.schema import ConfigError
    from neuroevo.sweeps.api import sweep
    from neuroevo.sweeps.space import parse_assignment

    if args.resume is not None:
        swept = (args.config, args.grid, args.uniform, args.loguniform, args.overrides)
        if args.sweep_dir is not None or any(swept):
            raise ConfigError(
                f"--resume {args.resume} continues the sweep as it was started; drop --sweep-dir, "
                "--config, --set, --grid and the ranges"
            )
        sweep(sweep_dir=args.resume, resume=True, quiet=args.quiet)
        return 0
    if args.sweep_dir is None:
        raise ConfigError("--sweep-dir is required (or --resume SWEEP_DIR)")
    if args.config is None:
        raise ConfigError("--config is required: the base config of every trial")
    sweep(
        args.config,
        args.sweep_dir,
        grid=dict(parse_assignment(text, "--grid") for text in args.grid),
        uniform=_ranges(args.uniform, "--uniform"),
        loguniform=_ranges(args.loguniform, "--loguniform"),
        samples=args.samples,
        seeds=args.seeds,
        overrides=args.overrides,
        scheduler=args.scheduler,
        metric=args.metric,
        trials_in_parallel=args.trials_in_parallel,
        perturbation_interval=args.perturbation_interval,
        address=args.address,
        quiet=args.quiet,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    quiet_tensorflow_start_up()
    args = _parser().parse_args(argv)
    where = args.resume or args.sweep_dir
    return run_command(lambda: _run(args), lambda: f"interrupted; continue with --resume {where}")


if __name__ == "__main__":
    sys.exit(main())
