"""One trial of a sweep, run by Ray Tune in a worker process: an ordinary run directory.

The trial trains its config with the library's :class:`~neuroevo.trainer.Trainer` in
``SWEEP/trials/trial-NNN`` (metrics, checkpoints, TensorBoard: ``neuroevo.play`` works on it),
reports each generation's summary to Tune, and hands Tune each library checkpoint it saves
(its files, the metrics so far and the trial's name). A checkpoint of another trial is PBT's
exploit: the run directory is rebuilt from it (the library's exact resume, under this trial's
new hyperparameters) and the step is appended to ``SWEEP/lineage.csv``. Its own checkpoint, or
none, resumes what the run directory holds.

A trial that ends writes ``SWEEP/status/trial-NNN.json``: ``finished`` with its last result
(a resumed sweep reports it again and touches nothing), or ``failed`` with a one-line reason.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neuroevo.config.overrides import merge_overrides
from neuroevo.config.schema import Config, config_from_dict, save_config
from neuroevo.run.checkpoints import step_of

__all__ = [
    "LINEAGE_COLUMNS",
    "TIMELINE_COLUMNS",
    "TrialSetup",
    "read_rows",
    "read_status",
    "row_metrics",
    "run_trial",
    "trial_name",
]

TRIALS_DIR = "trials"
STATUS_DIR = "status"
LINEAGE = "lineage.csv"
LINEAGE_COLUMNS = ("trial", "generation", "source", "frames", "own_frames", "overrides")
"""One row per exploit: the trial continued at ``generation`` from ``source``'s checkpoint of
the same generation (taken at ``frames``), having run to ``own_frames`` itself, with
``overrides`` (JSON) as its new hyperparameters."""
TIMELINE = "timeline.csv"
TIMELINE_COLUMNS = ("trial", "generation", "frames", "reported_at")
"""One row per generation a trial reports: its env steps so far and the clock time of the report
(Unix seconds), which lines up in time the trials that run at once."""


def trial_name(index: int) -> str:
    """The name (and run directory) of trial ``index``: stable across resumes."""
    return f"trial-{index:03d}"


@dataclasses.dataclass(frozen=True)
class TrialSetup:
    """What every trial of a sweep shares (sent once to the workers).

    Attributes:
        sweep_dir: absolute path of the sweep directory.
        base: the base config as a nested mapping (file and ``--set`` applied).
        metric: one of ``neuroevo.sweeps.space.METRICS``.
        threads: TensorFlow intra-op threads of a trial: its share of a node's CPUs.
        workers: ``evaluator.workers`` of a trial whose config leaves it null.
    """

    sweep_dir: str
    base: Mapping[str, Any]
    metric: str
    threads: int
    workers: int

    def config(self, overrides: Mapping[str, Any]) -> Config:
        """The trial's config: the base with its overrides, its evaluator sized to its share."""
        data = merge_overrides(self.base, overrides)
        if data.get("evaluator", {}).get("workers") is None:
            data = merge_overrides(data, {"evaluator.workers": self.workers})
        return config_from_dict(data)


def read_rows(path: Path) -> list[dict[str, str]]:
    """A run's ``metrics.csv`` rows (none when it does not exist yet)."""
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _number(text: str | None) -> float | None:
    if text in (None, ""):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def row_metrics(rows: list[dict[str, str]]) -> dict[str, float]:
    """The sweep metrics after the last of ``rows`` (a run's metrics, in order).

    ``test_return``: the paper test's mean when that generation ran one, else the elite's own
    score (ES: the centre's episodes; GA: its validation episodes), else the population mean.
    ``best_return``: the best episode return of the run so far.
    """
    last = rows[-1]
    test = next(
        value
        for value in (_number(last.get(k)) for k in ("test_mean", "elite_score", "mean"))
        if value is not None
    )
    finite = [
        b for b in (_number(r.get("best")) for r in rows) if b is not None and math.isfinite(b)
    ]
    return {"test_return": test, "best_return": max(finite, default=float("nan"))}


def read_status(sweep_dir: Path, name: str) -> dict[str, Any] | None:
    """The status a trial wrote when it ended, or None."""
    path = sweep_dir / STATUS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _write_status(sweep_dir: Path, name: str, status: dict[str, Any]) -> None:
    directory = sweep_dir / STATUS_DIR
    directory.mkdir(exist_ok=True)
    temporary = directory / f".{name}.json.tmp"
    temporary.write_text(json.dumps(status))
    os.replace(temporary, directory / f"{name}.json")


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and its message's lines joined."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def run_trial(config: dict[str, Any], setup: TrialSetup) -> None:
    """The Tune function of a trial; ``config["trial"]`` holds its index and overrides."""
    import tensorflow as tf
    from ray import tune

    # Before TensorFlow's runtime starts: the trial's share of the node, not all its cores.
    tf.config.threading.set_intra_op_parallelism_threads(setup.threads)
    sweep_dir = Path(setup.sweep_dir)
    name = tune.get_context().get_trial_name()
    status = read_status(sweep_dir, name)
    if status is not None and status["status"] == "finished":
        tune.report(status["result"])  # ended before the sweep was stopped: nothing to redo
        return
    overrides = {k: v for k, v in config["trial"].items() if k != "index"}
    try:
        cfg = setup.config(overrides)
        trainer = _open(cfg, overrides, sweep_dir, name, tune.get_checkpoint())
    except Exception as exc:
        _write_status(sweep_dir, name, {"status": "failed", "reason": one_line(exc)})
        raise
    try:
        result = None
        while trainer.budget_left():
            try:
                trainer.run_generation()
                result = _result(trainer, setup.metric)
            except Exception as exc:
                _write_status(sweep_dir, name, {"status": "failed", "reason": one_line(exc)})
                raise
            _report(trainer, sweep_dir, name, result)
        if result is None:  # the run had spent its budget before this start
            result = _result(trainer, setup.metric)
            tune.report(result)
    finally:
        trainer.close()
    _write_status(sweep_dir, name, {"status": "finished", "result": result})


def _open(
    cfg: Config, overrides: Mapping[str, Any], sweep_dir: Path, name: str, checkpoint: Any
) -> Any:
    """The trial's trainer, resumed from its run directory or from a Tune checkpoint."""
    from neuroevo.run.plan import plan
    from neuroevo.run.trainer import open_run

    run_dir = sweep_dir / TRIALS_DIR / name
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            source = json.loads((Path(directory) / "trial.json").read_text())["trial"]
            if source != name or not (run_dir / "config.yaml").is_file():
                own = read_rows(run_dir / "metrics.csv")
                generation = _adopt(Path(directory), run_dir, cfg)
                if source != name:
                    frames = (_frames(read_rows(run_dir / "metrics.csv")), _frames(own))
                    _record_exploit(sweep_dir, [name, generation, source, *frames], overrides)
    resume = (run_dir / "config.yaml").is_file()
    return open_run(plan(cfg, run_dir, resume=resume, start_over=resume), quiet=True)


def _adopt(source: Path, run_dir: Path, cfg: Config) -> int:
    """Rebuilds ``run_dir`` from an exported checkpoint: its library checkpoint, the metrics
    up to it, and ``cfg`` (the new hyperparameters). Returns the checkpoint's generation."""
    checkpoint = next(source.glob("ckpt-*"))
    if run_dir.exists():
        shutil.rmtree(run_dir)
    (run_dir / "checkpoints").mkdir(parents=True)
    shutil.copytree(checkpoint, run_dir / "checkpoints" / checkpoint.name)
    shutil.copyfile(source / "metrics.csv", run_dir / "metrics.csv")
    save_config(cfg, run_dir / "config.yaml")
    return step_of(checkpoint)


def _frames(rows: list[dict[str, str]]) -> str:
    return rows[-1]["frames"] if rows else "0"


def _record_exploit(sweep_dir: Path, cells: list[Any], overrides: Mapping[str, Any]) -> None:
    _append_row(sweep_dir / LINEAGE, [*cells, json.dumps(overrides)])


def _append_row(path: Path, cells: list[Any]) -> None:
    """Appends one CSV row; a single short ``write`` in append mode, so rows of trials running
    at once never interleave."""
    buffer = io.StringIO()
    csv.writer(buffer).writerow(cells)
    with path.open("a", newline="") as handle:
        handle.write(buffer.getvalue())


def _result(trainer: Any, metric: str) -> dict[str, Any]:
    """What a trial reports after a generation: the metrics row's numbers, the sweep metrics
    and the counters Tune's schedulers measure time in."""
    rows = read_rows(trainer.run.metrics_path)
    numbers = {k: _number(v) for k, v in rows[-1].items()}
    result = {k: v for k, v in numbers.items() if v is not None}
    result.update(row_metrics(rows))
    result.update(
        generation=trainer.optimizer.generation,
        frames=trainer.counters.frames,
        steps=trainer.counters.steps,
        wall_time_s=trainer.counters.wall_time_s,
        budget_spent=not trainer.budget_left(),
    )
    if not math.isfinite(result[metric]):
        raise FloatingPointError(
            f"{metric} is {result[metric]} after generation {result['generation']}"
        )
    return result


def _report(trainer: Any, sweep_dir: Path, name: str, result: dict[str, Any]) -> None:
    """Reports ``result``, with the checkpoint the trainer saved this generation if any, and
    records it in the sweep's timeline."""
    from ray import tune

    generation = trainer.optimizer.generation
    _append_row(sweep_dir / TIMELINE, [name, generation, result["frames"], time.time()])
    saved = trainer.run.checkpoint_dir / f"ckpt-{generation:06d}"
    if not saved.is_dir():
        tune.report(result)
        return
    with tempfile.TemporaryDirectory(prefix="neuroevo-trial-") as directory:
        export = Path(directory)
        shutil.copytree(saved, export / saved.name)
        shutil.copyfile(trainer.run.metrics_path, export / "metrics.csv")
        (export / "trial.json").write_text(json.dumps({"trial": name, "generation": generation}))
        tune.report(result, checkpoint=tune.Checkpoint.from_directory(directory))
