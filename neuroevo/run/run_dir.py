"""Run directory: resolved config, metrics CSV, TensorBoard scalars, elite policy.

Layout of a run directory::

    config.yaml    resolved config of the run (RunDir.create)
    metrics.csv    one row per generation (MetricsWriter)
    tensorboard/   TensorBoard event files (TensorBoardWriter)
    checkpoints/   ckpt-000012/ ... (neuroevo.run.checkpoints; each also holds the resolved config)
    elite.npz      the current elite: flat weights, its genome and, with observation
                   normalisation, the mean/std it was scored with; with virtual batch norm,
                   the reference batch (RunDir.save_elite)
    best.npz       the same for the best validated elite of the whole run
    test.json      scores of the last test (python -m neuroevo.evaluate)
    .lock          held by the process training the run (RunDir.claim)

Everything here is written so that a run killed at any moment can be resumed: files are
replaced atomically or appended one fsynced row at a time, and a resumed run drops the metric
rows written after its checkpoint. TensorFlow is imported only when TensorBoard is used.
"""

import contextlib
import csv
import dataclasses
import io
import itertools
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from neuroevo.config.schema import (
    RESUME_SAFE_KEYS,
    Config,
    ConfigError,
    diff_incompatible,
    imported_modules,
    load_config,
    save_config,
)
from neuroevo.core.files import (
    atomic_write,
    check_real_directory,
    fsync_dir,
    open_no_follow,
    try_lock,
)
from neuroevo.core.params import UnknownKeyError
from neuroevo.core.resources import check_writable, is_out_of_space, out_of_space_error
from neuroevo.run.checkpoints import STATE_FILE, read_npz, split_arrays, write_npz_atomic


@contextlib.contextmanager
def _disk_full_as_one_error(path: Path, fix: str = "resume the run") -> Iterator[None]:
    """Turns a full disk (or a file-size limit) while writing ``path`` into one
    ``ResourceError`` naming it, with no chain of ``ENOSPC`` tracebacks."""
    try:
        yield
    except OSError as exc:
        if not is_out_of_space(exc):
            raise
        raise out_of_space_error(exc, path, fix) from None


class RunDirError(ValueError):
    """A run directory cannot be used as asked (a file, holds another run, nothing to resume);
    bad input like any other ``ValueError``."""


class RunDir:
    """Paths and files of one training run.

    Args:
        path: The run directory; it need not exist before :meth:`create`.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.config_path = self.path / "config.yaml"
        self.metrics_path = self.path / "metrics.csv"
        self.tensorboard_dir = self.path / "tensorboard"
        self.checkpoint_dir = self.path / "checkpoints"
        self.elite_path = self.path / "elite.npz"
        self.best_path = self.path / "best.npz"
        self.test_path = self.path / "test.json"
        self.lock_path = self.path / ".lock"
        self._lock: io.FileIO | None = None  # a file object: dropped, it frees the lock

    def check(self, cfg: Config, resume: bool = False) -> None:
        """Checks, without writing anything, that the directory can be used as asked.

        A new run needs a missing or empty directory. Resuming needs a directory holding a run
        whose config differs from ``cfg`` only in keys that may change on resume (see
        :func:`neuroevo.config.schema.diff_incompatible`). Either way the directory must be writable
        (a file is created and removed to find out: a read-only mount is refused here, not
        after the run has started).

        Args:
            cfg: The config of the run.
            resume: Whether to continue the run already in the directory.

        Raises:
            RunDirError: If the directory cannot be used as asked; the message says what to
                do instead.
        """
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError(f"run directory '{self.path}' is a file; choose a directory")
        if self.config_path.exists():
            if not resume:
                raise RunDirError(
                    f"'{self.path}' already holds a run; continue it with --resume "
                    f"{self.path} or choose another run directory"
                )
            changed = diff_incompatible(self.saved_config(allow_imports=True), cfg)
            if changed:
                raise RunDirError(
                    f"cannot resume '{self.path}': {', '.join(changed)} differ from the saved "
                    f"run and would change its results; only {', '.join(RESUME_SAFE_KEYS)} may "
                    "change on resume, start a new run otherwise"
                )
        elif resume:
            raise RunDirError(f"cannot resume '{self.path}': it holds no run (no config.yaml)")
        elif self.path.exists() and any(self.path.iterdir()):
            raise RunDirError(
                f"'{self.path}' holds files but no run (no config.yaml); choose an empty or "
                "new run directory"
            )
        for directory in (self.checkpoint_dir, self.tensorboard_dir):
            try:
                check_real_directory(directory, "the run's directory")
            except ValueError as exc:
                raise RunDirError(str(exc)) from None
        fix = (
            "make it writable, or copy the run to a writable place and resume it there"
            if resume
            else "choose another --run-dir"
        )
        try:
            check_writable(self.path, f"the run directory '{self.path}'", fix)
        except ValueError as exc:
            raise RunDirError(str(exc)) from None

    def saved_config(self, *, allow_imports: bool) -> Config:
        """The run's ``config.yaml``, for a command about to use the run (resume, play,
        evaluate).

        A run may come from someone else, and a config naming a module to import is code
        (:func:`neuroevo.config.schema.imported_modules`): without ``allow_imports`` such a config
        is refused, naming the modules. A file that does not load says why: a key of another
        neuroevo version, a file cut short or not YAML (damaged outside neuroevo, which
        replaces it whole), or an invalid value.

        Raises:
            RunDirError: naming the file, the problem and the fix.
        """
        path = self.config_path
        try:
            cfg = load_config(path)
        except UnknownKeyError as err:
            raise RunDirError(
                f"cannot read {path}, written by another neuroevo version ({err}); rename the "
                "keys as the message says (docs/CONFIG.md lists renamed keys), or start a new run"
            ) from None
        except ConfigError as err:
            damage = "is truncated or corrupt" if _cut_short(path) else "holds an invalid value"
            raise RunDirError(
                f"{path} {damage} ({err}); restore it (each checkpoint's {STATE_FILE} holds the "
                "run's config under 'config:'), or start a new run"
            ) from None
        modules = imported_modules(cfg)
        if modules and not allow_imports:
            named = ", ".join(f"{module} ({key})" for key, module in modules.items())
            raise RunDirError(
                f"{path} names Python modules to import, and importing runs their code: "
                f"{named}; pass --allow-imports if you trust this run"
            )
        return cfg

    def create(self, cfg: Config, resume: bool = False) -> None:
        """Creates the directory, checked by :meth:`check` when the run was planned, and writes
        ``config.yaml``.

        ``config.yaml`` is (re)written with ``cfg`` resolved, also on resume, so it always
        describes the settings in force; the trainer calls this last, once everything else
        has been built, so a run that fails to start leaves the directory as it was.

        Raises:
            ResourceError: If the disk is full (the directory is left as it was).
        """
        # A full disk here leaves the directory as it was (a new run's empty, a resumed run's
        # old config.yaml in place): the same command works once there is space.
        fix = "resume the run with --resume" if resume else "start the run again"
        with _disk_full_as_one_error(self.path, fix=fix):
            self.path.mkdir(parents=True, exist_ok=True)
        with _disk_full_as_one_error(self.config_path, fix):
            save_config(cfg, self.config_path)

    def claim(self) -> None:
        """Claims the created directory for this process until :meth:`release`, or until the
        process ends: the lock is the OS's (``flock``), so a killed run leaves none behind.

        Two trainers of one run would interleave checkpoints and metric rows; the second one
        stops here instead, naming the first. The holder's process id is kept in ``.lock``.

        Raises:
            RunDirError: another process holds the directory.
        """
        if self._lock is not None:
            return
        with _disk_full_as_one_error(self.lock_path):
            lock = try_lock(self.lock_path)
        if lock is None:
            holder = self.lock_path.read_text(errors="replace").strip() or "unknown"
            if holder == str(os.getpid()):
                raise RunDirError(
                    f"'{self.path}' is in use by a trainer of this process; close it "
                    "(Trainer.close) before training the run again"
                )
            raise RunDirError(
                f"'{self.path}' is in use by another training process (pid {holder}); wait "
                "for it to end or stop it, then resume the run"
            )
        lock.truncate(0)
        lock.write(f"{os.getpid()}\n".encode())
        self._lock = lock

    def release(self) -> None:
        """Ends :meth:`claim` (nothing to do when not claimed)."""
        if self._lock is not None:
            self._lock.close()  # closing the descriptor drops the flock
            self._lock = None

    def restore_policies(self, checkpoint: Path, names: list[str]) -> None:
        """Puts back ``elite.npz`` / ``best.npz`` as saved with ``checkpoint`` (``names`` are
        the ones it holds) and removes those it lacks: written after that checkpoint, they
        belong to generations a resumed run plays again. Each file is replaced atomically."""
        for path in (self.elite_path, self.best_path):
            if path.name not in names:
                path.unlink(missing_ok=True)
                continue
            with (
                _disk_full_as_one_error(path),
                open(checkpoint / path.name, "rb") as source,
                atomic_write(path) as target,
            ):
                shutil.copyfileobj(source, target)
        fsync_dir(self.path)

    def metrics_writer(self, resume_generation: int | None = None) -> "MetricsWriter":
        """Returns the writer of ``metrics.csv``; see :class:`MetricsWriter`."""
        return MetricsWriter(self.metrics_path, resume_generation)

    def tensorboard_writer(self, resume_step: int | None = None) -> "TensorBoardWriter":
        """Returns a writer of TensorBoard scalars into ``tensorboard/`` (imports TensorFlow);
        see :class:`TensorBoardWriter` for ``resume_step``."""
        return TensorBoardWriter(self.tensorboard_dir, resume_step)

    def save_elite(
        self,
        genome: Mapping[str, Any],
        weights: np.ndarray,
        obs_stats: tuple[np.ndarray, np.ndarray] | None = None,
        reference_batch: np.ndarray | None = None,
        best: bool = False,
    ) -> None:
        """Atomically replaces ``elite.npz`` (or ``best.npz``) with the given policy.

        ``play.py`` needs only this file to replay the best policy, without the noise table.

        Args:
            genome: Plain description of the policy (seeds, noise indices, generation, score,
                ...); numpy scalars and tuples are allowed, arrays are not.
            weights: The policy's parameters, usually a flat ``[num_params]`` vector.
            obs_stats: ``(mean, std)`` of the observation normalisation the policy was scored
                with, when the model normalises observations: part of the policy.
            reference_batch: The virtual-batch-norm reference observations, when the model
                uses them: part of the policy too.
            best: Write ``best.npz`` instead of ``elite.npz``.

        Raises:
            TypeError: If ``genome`` holds an array or a value YAML cannot store.
            ResourceError: If the disk is full; the old ``elite.npz`` is kept and no temp
                file is left.
        """
        tree, arrays = split_arrays(genome)
        if arrays:
            raise TypeError(f"genome must hold plain values only, got arrays at {list(arrays)}")
        genome_yaml = yaml.safe_dump(tree, sort_keys=False)
        contents = {"weights": np.asarray(weights), "genome_yaml": np.array(genome_yaml)}
        if obs_stats is not None:
            contents["obs_mean"], contents["obs_std"] = (np.asarray(a) for a in obs_stats)
        if reference_batch is not None:
            contents["reference_batch"] = np.asarray(reference_batch)
        path = self.best_path if best else self.elite_path
        with _disk_full_as_one_error(path):
            write_npz_atomic(path, contents)

    def load_elite(self, best: bool = False) -> tuple[dict[str, Any], np.ndarray]:
        """Reads ``elite.npz`` (or ``best.npz``) back.

        Returns:
            ``(genome, weights)`` as given to :meth:`save_elite` (tuples become lists).

        Raises:
            FileNotFoundError: If the run has saved no elite yet.
            neuroevo.run.checkpoints.CheckpointError: If the file is corrupt.
        """
        arrays = self._policy_arrays(best)
        return yaml.safe_load(str(arrays["genome_yaml"])), arrays["weights"]

    def load_elite_obs_stats(self, best: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
        """The elite's observation normalisation ``(mean, std)``, or None if it has none.

        Raises:
            FileNotFoundError: If the run has saved no elite yet.
        """
        arrays = self._policy_arrays(best)
        if "obs_mean" not in arrays:
            return None
        return arrays["obs_mean"], arrays["obs_std"]

    def load_elite_reference_batch(self, best: bool = False) -> np.ndarray | None:
        """The elite's virtual-batch-norm reference batch, or None if its model has none.

        Raises:
            FileNotFoundError: If the run has saved no elite yet.
        """
        return self._policy_arrays(best).get("reference_batch")

    def _policy_arrays(self, best: bool) -> dict[str, np.ndarray]:
        path = self.best_path if best else self.elite_path
        if not path.is_file():
            raise FileNotFoundError(f"'{path}' does not exist: no elite saved yet")
        return read_npz(path)


def _cut_short(path: Path) -> bool:
    """Whether a saved config that fails to load was cut short or damaged: it does not end
    with a line break, is not a YAML mapping, or lacks a section ``save_config`` always
    writes."""
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return True
    sections = [field.name for field in dataclasses.fields(Config)]
    return (
        not text.endswith("\n")
        or not isinstance(data, dict)
        or any(name not in data for name in sections)
    )


def _cell(key: str, value: Any) -> str:
    """Formats one metric value for the CSV, keeping floats at full precision."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (bool, int, str)):
        return str(value)
    raise TypeError(f"metric '{key}' must be a scalar, got {type(value).__name__}")


def _intact_rows(path: Path) -> tuple[list[str] | None, list[tuple[int, list[str]]]]:
    """The header of a metrics file (None when it is empty) and its intact rows with their
    generation: a row cut short (the last one of a killed run, or one damaged from outside)
    has fewer cells, no line break or no readable generation, and is left out.

    Raises:
        ValueError: the file has no ``generation`` column.
    """
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines.pop()  # written partly when the previous run was killed
    rows = list(csv.reader(lines))
    if not rows:
        return None, []
    header = rows[0]
    if "generation" not in header:
        raise ValueError(f"'{path}' has no 'generation' column: not a metrics file")
    column = header.index("generation")
    intact = []
    for row in rows[1:]:
        number = _as_int(row[column]) if len(row) == len(header) else None
        if number is not None:
            intact.append((number, row))
    return header, intact


def first_missing_generation(path: Path) -> int:
    """The first generation without an intact row in the metrics file ``path`` (0 when the
    file is missing): a resume from a checkpoint after it could never log it again."""
    if not path.is_file():
        return 0
    present = {number for number, _ in _intact_rows(path)[1]}
    return next(g for g in itertools.count() if g not in present)


class MetricsWriter:
    """Appends one row per generation to a CSV file whose columns are fixed by the first row.

    Rows are flushed and fsynced one at a time, so a crash loses at most the row being
    written. Every row needs a ``generation`` column; a later row may leave columns out (empty
    cells) but may not add new ones, so the file stays a rectangular table.

    Args:
        path: The CSV file.
        resume_generation: None to start a new file (replacing any existing one); otherwise
            the generation of the checkpoint being resumed: existing rows with a larger
            generation, and rows cut short, are dropped and new rows are appended under the
            existing header (the trainer resumes from a checkpoint before any row cut short,
            :func:`first_missing_generation`, so each one is written again).
    """

    def __init__(self, path: str | Path, resume_generation: int | None = None) -> None:
        self.path = Path(path)
        self._columns: list[str] | None = None
        if resume_generation is not None and self.path.exists():
            self._keep_rows_through(resume_generation)

    @property
    def columns(self) -> list[str] | None:
        """Column names, or None before the first row of a new file."""
        return None if self._columns is None else list(self._columns)

    def _keep_rows_through(self, generation: int) -> None:
        header, rows = _intact_rows(self.path)
        if header is None:
            return
        kept = [header, *(row for number, row in rows if number <= generation)]
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(kept)
        with _disk_full_as_one_error(self.path), atomic_write(self.path) as file:
            file.write(buffer.getvalue().encode("utf-8"))
        self._columns = header

    def write(self, row: Mapping[str, Any]) -> None:
        """Appends one row and makes it durable.

        Args:
            row: Column name to scalar (int, float, str, bool, numpy scalar or None for an
                empty cell); must include ``generation``.

        Raises:
            ValueError: If ``generation`` is missing or the row has a column the file lacks.
            TypeError: If a value is not a scalar.
            ResourceError: If the disk is full (a partly written row is dropped on resume).
        """
        if "generation" not in row:
            raise ValueError("a metrics row needs a 'generation' column")
        cells = {key: _cell(key, value) for key, value in row.items()}
        new_file = self._columns is None
        if new_file:
            self._columns = list(row)
        extra = [key for key in row if key not in self._columns]
        if extra:
            raise ValueError(
                f"metrics columns {extra} are not in {self.path.name}; the first row fixes "
                f"the columns: {self._columns}"
            )
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        if new_file:
            writer.writerow(self._columns)
        writer.writerow([cells.get(column, "") for column in self._columns])
        with (
            _disk_full_as_one_error(self.path),
            open_no_follow(self.path, append=not new_file) as file,
        ):
            file.write(buffer.getvalue().encode("utf-8"))
            file.flush()
            os.fsync(file.fileno())


def _drop_events_after(logdir: Path, last_step: int) -> None:
    """Rewrites the event files of ``logdir`` into one that keeps only events with step <=
    ``last_step``; a record cut short by a kill ends its file's reading."""
    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    files = sorted(logdir.glob("events.out.tfevents.*"))
    if not files:
        return
    kept: list[bytes] = []
    for path in files:
        try:
            for record in tf.data.TFRecordDataset(str(path)):
                event = event_pb2.Event.FromString(record.numpy())
                if event.HasField("file_version") and kept:
                    continue  # one header is enough
                if event.step <= last_step:
                    kept.append(record.numpy())
        except tf.errors.DataLossError:
            pass
    # Named after the oldest file so that it sorts first: TensorBoard reads event files in
    # name order and never returns to one it has passed.
    first = files[0].name
    merged = logdir / (first if first.endswith(".resumed") else f"{first}.resumed")
    with atomic_write(merged) as file:
        file.write(_tfrecord_bytes(kept))
    for path in files:
        if path != merged:
            path.unlink()


def _tfrecord_bytes(records: list[bytes]) -> bytes:
    """``records`` framed as a TFRecord file. TensorFlow's writer only takes a path, so it
    writes to TensorFlow's in-memory file system, and :func:`atomic_write` puts the bytes in
    place (a path on disk could be a planted link)."""
    import tensorflow as tf

    name = f"ram://neuroevo/{uuid.uuid4().hex}.tfrecord"
    try:
        with tf.io.TFRecordWriter(name) as writer:
            for record in records:
                writer.write(record)
        with tf.io.gfile.GFile(name, "rb") as file:
            return file.read()
    finally:
        if tf.io.gfile.exists(name):
            tf.io.gfile.remove(name)


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


class TensorBoardWriter:
    """Writes scalars to TensorBoard event files; TensorFlow is imported on construction.

    Values are written with ``tf.summary.write`` and the scalar plugin's metadata rather than
    ``tf.summary.scalar``, which lives in the ``tensorboard`` package: writing event files then
    needs only TensorFlow, and ``tensorboard`` is needed only to look at them.

    Args:
        logdir: Directory of the event files.
        resume_step: When resuming from a checkpoint: the step of its last logged point. The
            existing event files are rewritten into one without the points after it (logged
            by the interrupted run after its checkpoint and about to be logged again), so
            TensorBoard shows each step once, as for a run never stopped.
    """

    def __init__(self, logdir: str | Path, resume_step: int | None = None) -> None:
        import tensorflow as tf  # lazily: TF takes seconds to import and only this class needs it

        if resume_step is not None:
            _drop_events_after(Path(logdir), resume_step)
        self._writer = tf.summary.create_file_writer(str(logdir))
        self._metadata = tf.compat.v1.SummaryMetadata(
            plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars"),
            data_class="DATA_CLASS_SCALAR",
        ).SerializeToString()

    def scalars(self, step: int, values: Mapping[str, float | int | None]) -> None:
        """Writes one value per tag at ``step`` and flushes; None values are skipped.

        Args:
            step: The x axis: the trainer logs emulator frames so far (runs with different
                generation sizes then compare on one axis).
            values: Tag (e.g. "return/best") to number, stored as float32 like TensorBoard's
                own scalar summaries.
        """
        import tensorflow as tf  # already loaded by __init__; this is a dict lookup

        with self._writer.as_default(step=step):
            for tag, value in values.items():
                if value is not None:
                    tensor = tf.constant(float(value), dtype=tf.float32)
                    tf.summary.write(tag, tensor, metadata=self._metadata)
        self._writer.flush()

    def close(self) -> None:
        """Flushes and closes the event file."""
        self._writer.close()
