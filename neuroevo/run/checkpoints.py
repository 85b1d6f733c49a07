"""Atomic save and restore of the whole training state, as YAML plus numpy arrays.

A checkpoint is a directory named after its step (generation), e.g. ``ckpt-000012/``::

    state.yaml   every non-array leaf of the state (scalars, strings, lists, nested dicts)
    arrays.npz   every numpy array leaf, stored under its key path ("optimizer/center")
    *.npz ...    optional files saved with the state (the trainer's elite.npz and best.npz),
                 hard-linked (or copied) in from where they are kept up to date
    MANIFEST     sha256 of every file, in ``sha256sum`` format (``sha256sum -c MANIFEST``)

Nothing is pickled: YAML is read with ``safe_load`` and arrays with ``allow_pickle=False``, so
a checkpoint from an untrusted source cannot run code.

Crash safety: a checkpoint is written into a hidden ``.ckpt-000012.saving`` directory, every
file and the directory are fsynced, then the directory is renamed into place and its parent
fsynced. A visible ``ckpt-*`` directory is therefore always complete unless something outside
this module damaged it; :func:`latest_checkpoint` verifies the manifest anyway (and, given a
``validate`` function, the content: sections, types, shapes) and falls back to the newest
intact checkpoint, warning about each one it skips. Old checkpoints are renamed to a hidden
name before deletion so a crash never leaves a half-deleted ``ckpt-*``; a plain file that
happens to be named like a checkpoint is moved aside (``ckpt-000008.not-a-checkpoint``) by
the save that needs its name, never deleted.

One process writes a run's checkpoints at a time.
"""

import hashlib
import itertools
import os
import re
import shutil
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import yaml

from neuroevo.core.files import atomic_write, fsync_dir
from neuroevo.core.resources import is_out_of_space

STATE_FILE = "state.yaml"
ARRAYS_FILE = "arrays.npz"
MANIFEST_FILE = "MANIFEST"

_NAME = re.compile(r"ckpt-(\d{6,})")
_EXTRA_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.npz")
_SAVING = ".saving"
_DELETING = ".deleting"


class CheckpointError(ValueError):
    """A checkpoint or array file is incomplete, corrupt or does not hold a valid state."""


def _plain(value: Any, path: str) -> Any:
    """Returns ``value`` as plain YAML data: numpy scalars unwrapped, tuples as lists."""
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{path}/{i}") for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        return {_check_key(k, path): _plain(v, f"{path}/{k}") for k, v in value.items()}
    if isinstance(value, np.ndarray):
        raise TypeError(f"state '{path}': numpy arrays may only be dict values, not list items")
    raise TypeError(f"state '{path}': {type(value).__name__} is neither plain data nor an array")


def _check_key(key: Any, parent: str) -> str:
    if not isinstance(key, str) or not key or "/" in key:
        raise ValueError(
            f"state key {key!r} under '{parent or '/'}' must be a non-empty string without '/'"
        )
    return key


def split_arrays(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Separates the numpy arrays of a nested state dict from its plain data.

    Args:
        state: Nested dict with string keys (no "/"); leaves are None, bool, int, float, str,
            lists/tuples/dicts of those, numpy scalars, or numpy arrays (as dict values only).

    Returns:
        ``(tree, arrays)``: ``tree`` is ``state`` without its arrays (every dict kept, even one
        left empty, numpy scalars as Python scalars, tuples as lists), ``arrays`` maps
        "/"-joined key paths to the arrays.

    Raises:
        ValueError: On a key that is not a non-empty string without "/".
        TypeError: On a leaf of another type, an array inside a list or an object array.
    """
    arrays: dict[str, np.ndarray] = {}

    def split(node: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        tree: dict[str, Any] = {}
        for key, value in node.items():
            path = f"{prefix}/{_check_key(key, prefix)}" if prefix else _check_key(key, prefix)
            if isinstance(value, np.ndarray):
                if value.dtype.hasobject:
                    raise TypeError(f"state '{path}': object arrays would need pickle")
                arrays[path] = value
            elif isinstance(value, Mapping):
                tree[key] = split(value, path)
            else:
                tree[key] = _plain(value, path)
        return tree

    return split(state, ""), arrays


def merge_arrays(tree: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Puts arrays back into ``tree`` (in place) at their "/"-joined key paths.

    The inverse of :func:`split_arrays`.

    Raises:
        CheckpointError: If a path runs through a value that is not a dict.
    """
    for path, array in arrays.items():
        *parents, leaf = path.split("/")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise CheckpointError(f"array '{path}' clashes with a plain value at '{part}'")
        node[leaf] = array
    return tree


def _write_npz(file: BinaryIO, arrays: Mapping[str, np.ndarray]) -> None:
    # np.savez takes the names as keyword arguments, so a state key called "file" would
    # clash; writing the members directly has no reserved names.
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Reads every array of an ``.npz`` file into memory, refusing pickled objects.

    Raises:
        CheckpointError: If the file is not a readable npz archive.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise CheckpointError(f"'{path}' is not a valid npz archive: {err}") from None


def _write_synced(path: Path, write: Callable[[BinaryIO], object]) -> None:
    with open(path, "wb") as file:
        write(file)
        file.flush()
        os.fsync(file.fileno())


def write_npz_atomic(path: str | Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Writes arrays to an ``.npz`` file that is either fully old or fully new after a crash
    (:func:`neuroevo.core.files.atomic_write`).

    Args:
        path: Destination file.
        arrays: Name (may contain "/") to array; object arrays are refused.
    """
    with atomic_write(path) as file:
        _write_npz(file, arrays)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def step_of(path: str | Path) -> int:
    """The step of a checkpoint directory ``ckpt-000012`` (12)."""
    match = _NAME.fullmatch(Path(path).name)
    if match is None:
        raise ValueError(f"'{path}' is not named like a checkpoint (ckpt-NNNNNN)")
    return int(match.group(1))


def _checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Lists ``(step, path)`` of the visible checkpoint directories, oldest first."""
    found = []
    for entry in run_dir.iterdir():
        match = _NAME.fullmatch(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    return sorted(found)


def _strays(run_dir: Path) -> list[Path]:
    """Entries named like a checkpoint that are not directories, newest name first."""
    return sorted(
        (e for e in run_dir.iterdir() if _NAME.fullmatch(e.name) and not e.is_dir()), reverse=True
    )


def _delete(path: Path) -> None:
    """Deletes a directory tree, or a file (or link) left where a directory was expected."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _remove_dir(path: Path) -> None:
    """Deletes a directory by first renaming it to a hidden name, so it vanishes at once."""
    doomed = path.with_name(f".{path.name}{_DELETING}")
    if doomed.exists() or doomed.is_symlink():
        _delete(doomed)
    os.rename(path, doomed)
    _delete(doomed)


def _move_aside(path: Path) -> Path:
    """Renames a stray non-directory ``ckpt-*`` entry out of the checkpoints' way (someone
    else's file: kept, not deleted) and warns; returns its new path."""
    target = path.with_name(f"{path.name}.not-a-checkpoint")
    for n in itertools.count(1):
        if not (target.exists() or target.is_symlink()):
            break
        target = path.with_name(f"{path.name}.not-a-checkpoint.{n}")
    os.rename(path, target)
    warnings.warn(
        f"'{path}' is not a checkpoint directory but has a checkpoint's name; moved it to "
        f"'{target.name}' to save checkpoint {path.name} there",
        stacklevel=3,
    )
    return target


def _link_or_copy(source: Path, target: Path) -> None:
    """Hard-links ``source`` to ``target`` (the source is replaced by rename, never written in
    place, so the link keeps this version), or copies it where links are not supported."""
    try:
        os.link(source, target)
    except OSError as exc:
        if is_out_of_space(exc):
            raise
        shutil.copyfile(source, target)
        with open(target, "rb") as file:
            os.fsync(file.fileno())


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    state: Mapping[str, Any],
    keep: int,
    files: Mapping[str, str | Path] | None = None,
) -> Path:
    """Atomically writes ``state`` as checkpoint ``step`` and prunes old checkpoints.

    After the save, the ``keep`` newest checkpoints up to ``step`` remain. Checkpoints with a
    larger step are deleted: they belong to a timeline the run abandoned when it resumed
    from an earlier one. A checkpoint with the same step is replaced; a plain file in its
    place is moved aside with a warning.

    Args:
        run_dir: Directory holding the checkpoints (created if missing).
        step: Generation number, >= 0; names the directory ``ckpt-{step:06d}``.
        state: Nested dict, see :func:`split_arrays` for the allowed leaves.
        keep: How many checkpoints to keep, >= 1.
        files: Name (a plain ``*.npz`` file name) to an existing file saved with the state
            and covered by its manifest; read them back with :func:`checkpoint_file`.

    Returns:
        Path of the new checkpoint directory.

    Raises:
        ValueError, TypeError: If ``step``, ``keep`` or ``state`` is invalid; nothing is
            written then.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an integer >= 0, got {step!r}")
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep!r}")
    files = {name: Path(source) for name, source in (files or {}).items()}
    for name in files:
        if not _EXTRA_FILE.fullmatch(name) or name == ARRAYS_FILE:
            raise ValueError(f"checkpoint file name {name!r} must be a plain '*.npz' name")
    tree, arrays = split_arrays(state)
    state_yaml = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True).encode("utf-8")

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    final = run_dir / f"ckpt-{step:06d}"
    tmp = run_dir / f".{final.name}{_SAVING}"
    if tmp.exists() or tmp.is_symlink():
        _delete(tmp)
    tmp.mkdir()
    _write_synced(tmp / STATE_FILE, lambda file: file.write(state_yaml))
    _write_synced(tmp / ARRAYS_FILE, lambda file: _write_npz(file, arrays))
    for name, source in files.items():
        _link_or_copy(source, tmp / name)
    names = (STATE_FILE, ARRAYS_FILE, *files)
    manifest = "".join(f"{_sha256(tmp / name)}  {name}\n" for name in names)
    _write_synced(tmp / MANIFEST_FILE, lambda file: file.write(manifest.encode("ascii")))
    fsync_dir(tmp)
    if final.is_dir() and not final.is_symlink():
        _remove_dir(final)
    elif final.exists() or final.is_symlink():
        _move_aside(final)
    os.rename(tmp, final)
    fsync_dir(run_dir)

    existing = _checkpoints(run_dir)
    up_to_step = [path for s, path in existing if s <= step]
    abandoned = [path for s, path in existing if s > step]
    for path in up_to_step[:-keep] + abandoned:
        _remove_dir(path)
    for leftover in run_dir.glob(".ckpt-*"):
        _delete(leftover)
    return final


def checkpoint_file(path: str | Path, name: str) -> Path | None:
    """The file ``name`` saved with checkpoint ``path`` (``save_checkpoint(files=...)``), or
    None if it has none of that name. Verified with the rest by :func:`load_checkpoint`."""
    file = Path(path) / name
    return file if _EXTRA_FILE.fullmatch(name) and file.is_file() else None


def _verify(path: Path) -> None:
    """Checks that a checkpoint's files exist and match the sha256 sums of its MANIFEST."""
    try:
        lines = (path / MANIFEST_FILE).read_bytes().decode("ascii").splitlines()
    except FileNotFoundError:
        raise CheckpointError(f"{MANIFEST_FILE} is missing (incomplete save)") from None
    except UnicodeDecodeError:
        raise CheckpointError(f"{MANIFEST_FILE} is corrupt") from None
    expected = {}
    for line in lines:
        digest, separator, name = line.partition("  ")
        if separator:
            expected[name] = digest
    extra = [name for name in expected if name not in (STATE_FILE, ARRAYS_FILE)]
    if (
        STATE_FILE not in expected
        or ARRAYS_FILE not in expected
        or not all(_EXTRA_FILE.fullmatch(name) for name in extra)
    ):
        raise CheckpointError(f"{MANIFEST_FILE} is corrupt: it lists {sorted(expected)}")
    for name, digest in expected.items():
        if not (path / name).is_file():
            raise CheckpointError(f"{name} is missing")
        if _sha256(path / name) != digest:
            raise CheckpointError(f"{name} does not match its sha256 (truncated or corrupt)")


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Verifies a checkpoint directory and reads its state back.

    Args:
        path: A ``ckpt-*`` directory written by :func:`save_checkpoint`.

    Returns:
        The nested state dict, arrays as ``np.ndarray`` (same dtype and shape as saved),
        tuples as lists and numpy scalars as Python scalars.

    Raises:
        CheckpointError: If a file is missing, corrupt or does not match the manifest.
    """
    path = Path(path)
    _verify(path)
    try:
        tree = yaml.safe_load((path / STATE_FILE).read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{STATE_FILE} is not valid YAML: {err}") from None
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise CheckpointError(f"{STATE_FILE} does not hold a mapping")
    return merge_arrays(tree, read_npz(path / ARRAYS_FILE))


def latest_checkpoint(
    run_dir: str | Path,
    skipped: list[str] | None = None,
    validate: Callable[[Path, dict[str, Any]], None] | None = None,
) -> tuple[int, dict[str, Any]] | None:
    """Loads the newest intact checkpoint of ``run_dir``.

    Checkpoints that fail verification (or ``validate``) are skipped with a warning naming the
    directory and the reason, and so are leftovers of an interrupted save and plain files
    named like a checkpoint.

    Args:
        run_dir: Directory given to :func:`save_checkpoint`.
        skipped: If given, one ``"name: reason"`` line per skipped checkpoint or leftover is
            appended to it, newest first, instead of a warning: the caller reports them (and
            can say why nothing was found).
        validate: ``validate(path, state)`` checks a loaded checkpoint's content (sections,
            types, shapes), raising CheckpointError with the reason when it cannot be resumed
            from; the manifest only proves the files are as they were written.

    Returns:
        ``(step, state)`` of the newest intact checkpoint, or None if there is none (or the
        directory does not exist).
    """
    return CheckpointScan(run_dir).newest(validate, skipped, stacklevel=4)


class CheckpointScan:
    """The checkpoints of a directory, listed once and each loaded (and verified) at most
    once, however many times the newest one passing some check is asked for.

    A resumed run asks twice: for the newest intact checkpoint before anything is built (is
    there anything to resume, and its reference batch), then for the newest whose content
    fits the built optimizer.
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._notes: list[tuple[Path, str]] = []
        self._entries: list[tuple[int, Path]] = []
        self._loaded: dict[Path, dict[str, Any] | CheckpointError] = {}
        if self.directory.is_dir():
            for leftover in sorted(self.directory.glob(f".ckpt-*{_SAVING}"), reverse=True):
                self._notes.append((leftover, "left by an interrupted save"))
            for stray in _strays(self.directory):
                self._notes.append(
                    (stray, "not a directory (the next save of this step moves it aside)")
                )
            self._entries = list(reversed(_checkpoints(self.directory)))

    def _load(self, path: Path) -> dict[str, Any]:
        if path not in self._loaded:
            try:
                self._loaded[path] = load_checkpoint(path)
            except CheckpointError as err:
                self._loaded[path] = err
        found = self._loaded[path]
        if isinstance(found, CheckpointError):
            raise found
        return found

    def newest(
        self,
        validate: Callable[[Path, dict[str, Any]], None] | None = None,
        skipped: list[str] | None = None,
        *,
        stacklevel: int = 3,
    ) -> tuple[int, dict[str, Any]] | None:
        """``(step, state)`` of the newest intact checkpoint that ``validate`` accepts, or
        None; what is skipped is reported as :func:`latest_checkpoint` does."""

        def skip(path: Path, reason: str) -> None:
            if skipped is None:
                warnings.warn(f"skipping '{path}': {reason}", stacklevel=stacklevel)
            else:
                skipped.append(f"{path.name}: {reason}")

        for path, reason in self._notes:
            skip(path, reason)
        for step, path in self._entries:
            try:
                state = self._load(path)
                if validate is not None:
                    validate(path, state)
            except ValueError as err:  # CheckpointError, or a state validate refuses
                skip(path, str(err))
            else:
                return step, state
        return None
