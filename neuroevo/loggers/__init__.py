"""Experiment trackers: W&B and MLflow get what the run directory records (``metrics.csv`` and
TensorBoard stay where they are, in :mod:`neuroevo.runlog`).

A tracker is on when its section (``logging.wandb``, ``logging.mlflow``) is in the config. It
receives the resolved config as run parameters when it starts, every per-generation scalar of
``metrics.csv`` (the trainer's row, None values left out) at the step TensorBoard uses (frames
so far), and the run's ``elite.npz`` and ``best.npz`` as artifacts when training ends.

Failures are split by when they happen. Starting (a package not installed, a server that does
not answer, an unknown project) raises :class:`TrackerError` from :func:`start_trackers`,
which :func:`~neuroevo.trainer.open_run` calls before it writes anything, so the command ends
with one ``error:`` line. Later, a tracker that fails is warned about once and dropped, and
training goes on: the run directory keeps the full record.

A resumed run continues the same tracker runs: their ids are kept in the run directory
(``trackers.yaml``). Generations logged after the checkpoint it resumes from are logged again
(deterministically the same values but the wall time); W&B ignores a step it already has,
MLflow keeps both points.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

from neuroevo.core.extras import MissingExtraError, require
from neuroevo.core.files import atomic_write

__all__ = [
    "IDS_FILE",
    "Tracker",
    "TrackerError",
    "Trackers",
    "require_trackers",
    "start_trackers",
]

IDS_FILE = "trackers.yaml"
"""File in the run directory holding each tracker's run id, so that a resume continues it."""


class TrackerError(ValueError):
    """A tracker could not start (missing package, unreachable server, bad settings); the
    message is one line naming the config section."""


class Tracker(Protocol):
    """One experiment tracker's run: what :class:`Trackers` calls."""

    name: str
    """Config section name (``wandb``, ``mlflow``), for messages."""

    run_id: str
    """The tracker's id of the run, kept in ``trackers.yaml`` for a resume."""

    def scalars(self, step: int, values: Mapping[str, float | int]) -> None:
        """Logs one generation's scalars at ``step`` (frames so far)."""

    def finish(self, artifacts: Sequence[Path]) -> None:
        """Uploads ``artifacts`` (empty when the run stopped early) and ends the run."""


def require_trackers(logging_cfg: Any) -> None:
    """Checks, without importing them, that the packages of the configured trackers are
    installed (an entry point calls this before building anything).

    Raises:
        TrackerError: One is missing; the message names the extra that installs it.
    """
    for name in ("wandb", "mlflow"):
        if getattr(logging_cfg, name) is not None:
            try:
                require(name, f"logging.{name}")
            except MissingExtraError as exc:
                raise TrackerError(str(exc)) from None


def start_trackers(
    logging_cfg: Any, config: Mapping[str, Any], run_dir: Path, resume: bool
) -> Trackers:
    """Starts the trackers the config asks for (none: an empty :class:`Trackers`).

    Args:
        logging_cfg: The config's ``logging`` section.
        config: The resolved config as a plain dict (the run parameters).
        run_dir: The run directory; its name is the default run name, and on resume its
            ``trackers.yaml`` names the tracker runs to continue.
        resume: Whether the run directory's run is being resumed.

    Raises:
        TrackerError: A tracker's package is missing or it cannot start; trackers started
            before it are ended.
    """
    ids: dict[str, str] = {}
    if resume and (run_dir / IDS_FILE).is_file():
        ids = yaml.safe_load((run_dir / IDS_FILE).read_text()) or {}
    require_trackers(logging_cfg)
    started: list[Tracker] = []
    for name, options in (("wandb", logging_cfg.wandb), ("mlflow", logging_cfg.mlflow)):
        if options is None:
            continue
        try:
            started.append(_open(name, options, config, run_dir.name, ids.get(name)))
        except Exception as exc:  # any failure of a third-party client
            Trackers(started).close()
            raise TrackerError(
                f"logging.{name} cannot start: {type(exc).__name__}: {exc}"
            ) from None
    return Trackers(started)


def _open(
    name: str, options: Any, config: Mapping[str, Any], run_name: str, run_id: str | None
) -> Tracker:
    """Imports the tracker's module only now: its package is imported by it."""
    if name == "wandb":
        from neuroevo.loggers.wandb import WandbTracker

        return WandbTracker(options, config, run_name, run_id)
    from neuroevo.loggers.mlflow import MlflowTracker

    return MlflowTracker(options, config, run_name, run_id)


class Trackers:
    """The started trackers of a run, with the mid-run policy: a failing tracker is warned
    about once and dropped, and the run goes on.

    Args:
        trackers: The started trackers.
    """

    def __init__(self, trackers: Sequence[Tracker]) -> None:
        self._trackers = list(trackers)

    def __bool__(self) -> bool:
        return bool(self._trackers)

    def save_ids(self, run_dir: Path) -> None:
        """Writes ``trackers.yaml`` so that a resume continues these tracker runs."""
        if self._trackers:
            ids = {tracker.name: tracker.run_id for tracker in self._trackers}
            with atomic_write(run_dir / IDS_FILE) as handle:
                handle.write(yaml.safe_dump(ids).encode())

    def scalars(self, step: int, values: Mapping[str, float | int | None]) -> None:
        """Logs ``values`` (None ones left out) at ``step`` to every tracker."""
        present = {key: value for key, value in values.items() if value is not None}
        self._each(lambda tracker: tracker.scalars(step, present))

    def close(self, artifacts: Sequence[Path] = ()) -> None:
        """Uploads those of ``artifacts`` that exist and ends every tracker run; idempotent."""
        files = [path for path in artifacts if path.is_file()]
        self._each(lambda tracker: tracker.finish(files))
        self._trackers = []

    def _each(self, call: Any) -> None:
        for tracker in list(self._trackers):
            try:
                call(tracker)
            except Exception as exc:  # a tracker never stops training
                self._trackers.remove(tracker)
                warnings.warn(
                    f"logging.{tracker.name} failed ({type(exc).__name__}: {exc}); training "
                    "goes on without it (metrics.csv keeps the full record)",
                    RuntimeWarning,
                    stacklevel=3,
                )
