"""``python -m neuroevo.train``: start, resume and watch a training run.

    python -m neuroevo.train                                  # the quick default (GA, Atari)
    python -m neuroevo.train --config configs/ga_atari.yaml --set env.id=frostbite
    python -m neuroevo.train --resume runs/ga-frostbite-20261202-1200

Bad input (missing or malformed config, unknown keys, bad values, sizes that do not fit memory
or disk, a run dir that holds another run, an incompatible resume or one without a valid
checkpoint) prints one line and exits with code 2, before anything is created or overwritten
(:mod:`neuroevo.cli.common`); so does a run directory that stops being writable mid-run (the message
says to make it writable and resume). Ctrl-C stops after the workers stop; the last finished
generation is kept.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from neuroevo.cli.common import (
    EXIT_INTERRUPTED,
    USER_ERRORS,
    Parser,
    add_allow_imports,
    fail,
    is_file_error,
    is_out_of_memory,
    one_line_warnings,
    out_of_memory_message,
    quiet_tensorflow_start_up,
    run_command,
)
from neuroevo.core.resources import (
    ResourceError,
    check_start_up_address_space,
    is_out_of_space,
    out_of_space_error,
)

if TYPE_CHECKING:
    from neuroevo.config.schema import Config

QUICK_CONFIG = "quick_atari.yaml"
"""The config used when ``--config`` is not given (shipped in ``configs/``)."""


def configs_dir() -> Path:
    """``configs/`` of a checkout, else the copy installed with the package."""
    package_dir = Path(__file__).resolve().parents[1]
    for candidate in (package_dir.parent / "configs", package_dir / "_configs"):
        if (candidate / QUICK_CONFIG).is_file():
            return candidate
    raise FileNotFoundError(f"the bundled configs are missing; reinstall neuroevo ({QUICK_CONFIG})")


class _TrainParser(Parser):
    """The train command's parser: its description lists the registered optimizers and env
    kinds, read from the registries only when ``--help`` asks for it (they import numpy)."""

    def format_help(self) -> str:
        from neuroevo.algorithms import ALGORITHMS
        from neuroevo.envs import ENV_KINDS

        self.description = (
            f"Train a population with one of the {len(ALGORITHMS)} registered optimizers "
            f"({', '.join(ALGORITHMS)}) on an env of kind {', '.join(ENV_KINDS)}."
        )
        return super().format_help()


def _parser() -> argparse.ArgumentParser:
    parser = _TrainParser(prog="python -m neuroevo.train")
    parser.add_argument("--config", type=Path, help=f"YAML config (default: {QUICK_CONFIG})")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override one config value; repeatable",
    )
    parser.add_argument("--run-dir", type=Path, help="where to write the run (default: runs/...)")
    parser.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a run")
    parser.add_argument(
        "--start-over",
        action="store_true",
        help="with --resume: run again from generation 0 when the run has no valid "
        "checkpoint (its metrics are discarded) instead of refusing",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar or summary lines")
    add_allow_imports(parser, "--resume")
    return parser


def resolve(args: argparse.Namespace) -> tuple[Config, Path, bool]:
    """Works out the config, the run directory and whether to resume; raises on bad input.
    Whether the run can be used so (on resume: with this config) is the plan's to check."""
    # Imported here, not at the top: it imports numpy and the algorithm registry (not
    # TensorFlow), and a Ctrl-C meanwhile must reach main's handler.
    from neuroevo.config.schema import ConfigError, load_config
    from neuroevo.run.run_dir import RunDir

    if args.resume is not None and args.run_dir is not None:
        raise ConfigError(
            f"--run-dir and --resume both name a run directory; --resume {args.resume} "
            "continues the run where it is, drop --run-dir"
        )
    if args.start_over and args.resume is None:
        raise ConfigError("--start-over only applies to --resume RUN_DIR")
    if args.resume is not None:
        run = RunDir(args.resume)
        if not run.config_path.is_file():
            raise ConfigError(
                f"--resume {args.resume}: no run there ({run.config_path} is missing)"
            )
        run.saved_config(allow_imports=args.allow_imports)  # a run's imports are trusted?
        cfg = load_config(args.config or run.config_path, args.overrides)
        return cfg, args.resume, True
    cfg = load_config(args.config or configs_dir() / QUICK_CONFIG, args.overrides)
    run_dir = args.run_dir or Path("runs") / (
        f"{cfg.algorithm.name}-{cfg.env.id}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    return cfg, run_dir, False


def _interrupted_start(run_dir: Path | None, args: argparse.Namespace) -> str:
    """What Ctrl-C during start-up left behind. The trainer writes the run directory only
    once everything is built, so usually nothing."""
    if run_dir is None or args.resume is not None or not (run_dir / "config.yaml").exists():
        return "interrupted during start-up; nothing was written"
    return (
        f"interrupted during start-up, after {run_dir} was created; start it with "
        f"--resume {run_dir} --start-over"
    )


def main(argv: list[str] | None = None) -> int:
    quiet_tensorflow_start_up()
    args = _parser().parse_args(argv)
    run_dir = trainer = None

    def start() -> int:
        nonlocal run_dir, trainer
        check_start_up_address_space()
        cfg, run_dir, resume = resolve(args)
        from neuroevo.run.plan import plan

        # Sizes are checked before TensorFlow is imported: it may not even start.
        planned = plan(cfg, run_dir, resume=resume, start_over=args.start_over)
        from neuroevo.run.trainer import open_run

        trainer = open_run(planned, quiet=args.quiet)
        return 0

    code = run_command(start, lambda: _interrupted_start(run_dir, args))
    if trainer is None:
        return code
    from neuroevo.envs.base import CallbackError
    from neuroevo.evaluation.results import EpisodeDataError

    if not args.quiet:
        print(f"run directory: {run_dir}", file=sys.stderr)
    try:
        with one_line_warnings():
            trainer.train()
    except ResourceError as exc:  # a full disk while writing the elite or metrics
        return fail(f"{exc} ({_resume_command(run_dir)})")
    except (CallbackError, EpisodeDataError) as exc:  # the user's code failed, or their env
        return fail(f"{exc}; the run is kept, resume it with {_resume_command(run_dir)}")
    except OSError as exc:  # a full disk, or a run directory made unwritable, mid-run
        if is_out_of_space(exc):
            then = f"resume with {_resume_command(run_dir)}"
            return fail(out_of_space_error(exc, exc.filename or run_dir, then))
        if not is_file_error(exc):
            raise
        return fail(
            f"cannot write the run's files: {exc}; make {run_dir} writable again, then resume "
            f"with {_resume_command(run_dir)}"
        )
    except USER_ERRORS as exc:  # e.g. a test.json that became a directory mid-run
        return fail(f"{exc}; then resume with {_resume_command(run_dir)}")
    except KeyboardInterrupt:
        print(f"\ninterrupted; resume with {_resume_command(run_dir)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        return fail(f"{out_of_memory_message(exc)}; then resume with {_resume_command(run_dir)}")
    return 0


def _resume_command(run_dir: Path) -> str:
    """How to continue a run that stopped: ``--resume`` from its newest valid checkpoint, or
    with ``--start-over`` when it saved none yet (``--resume`` alone would refuse)."""
    from neuroevo.run.checkpoints import latest_checkpoint
    from neuroevo.run.run_dir import RunDir

    found = latest_checkpoint(RunDir(run_dir).checkpoint_dir, skipped=[])
    return f"--resume {run_dir}" + ("" if found is not None else " --start-over")
