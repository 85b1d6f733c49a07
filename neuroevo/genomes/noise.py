"""The shared noise table: one seeded block of float32 N(0, 1) samples.

Deep neuroevolution never ships weight vectors around. Every random vector an optimizer needs
(an initialisation, a GA mutation, an ES perturbation) is a slice ``table[index:index + P]`` of
one table that every worker and every process can rebuild from ``(seed, size)``, so a genome
is a handful of integers (Salimans et al. 2017, Such et al. 2017 use 250M floats, 1 GB).

Why it is built this way:

- **Deterministic from (seed, size) alone.** The table is cut into fixed chunks of
  ``CHUNK_SIZE`` floats; chunk ``c`` comes from its own PCG64 generator seeded with child ``c``
  of ``SeedSequence(seed)``. The chunk layout does not depend on the thread count, and a
  smaller table is a prefix of a larger one with the same seed.
- **Fast.** Chunks are independent, so a thread pool fills them in parallel (numpy's
  generators release the GIL). Opening a cached table is a memory map, so every process
  after the first starts at once (timings: docs/LAB-NOTEBOOK.md).
- **Generated once per machine.** With a cache directory the table is written to a ``.npy``
  file named by seed and size, atomically (temp file, fsync, rename) and under an exclusive
  ``fcntl`` lock, so two processes never both generate it; later processes memory-map it
  read-only and share its pages through the OS page cache.
- **Safe on a full disk.** The free space is checked before anything is written, space is
  reserved with ``posix_fallocate`` and the file is written with ordinary writes (never through
  a memory map, where a full disk is a ``SIGBUS``); a failed write raises ``ResourceError`` and
  leaves no temp or lock file behind.
- **Checked when opened.** Beside each table a small ``.check`` file records the file's size
  and a sha256 of values sampled across the table (:data:`CHECK_SAMPLES`), written before the
  table is renamed into place. A cached table of the wrong size (a copy cut short, a file
  truncated by hand) or whose sample differs is regenerated, with a warning, under the same
  lock and atomic rename; hashing all of a 1 GB table at every start would cost seconds.
- **No copies.** :meth:`NoiseTable.get` returns a read-only view into the table.

- **Uber's table too.** ``generator="uber"`` makes the table of Uber's deep-neuroevolution
  code instead (``np.random.RandomState(seed).randn(size)`` as float32; its ``SharedNoiseTable``
  uses seed 123 and 250M values), so genomes published with that code decode here
  (``neuroevo.compat.uber``). That stream is sequential, so it is generated on one thread,
  a chunk at a time (a legacy ``RandomState`` continues the same stream across calls).

The cache lives in ``$NEUROEVO_CACHE/noise`` if that variable is set, else
``$XDG_CACHE_HOME/neuroevo/noise``, else ``~/.cache/neuroevo/noise``. POSIX only (``fcntl``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import math
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np

from neuroevo.core.files import atomic_write, open_no_follow
from neuroevo.core.resources import (
    ResourceError,
    check_disk,
    check_memory,
    check_writable,
    format_bytes,
    is_out_of_space,
    out_of_space_error,
)

__all__ = [
    "CHUNK_SIZE",
    "DEFAULT_SIZE",
    "GENERATORS",
    "NoiseTable",
    "cache_path",
    "check_file_path",
    "default_cache_dir",
    "file_bytes",
    "table_problem",
]

DEFAULT_SIZE = 250_000_000
"""Table size used by the papers: 250M float32 values, 1 GB."""

CHUNK_SIZE = 1 << 22
"""Floats per independently seeded chunk. Part of the table's definition: changing it changes
every table, so it is fixed, not a parameter."""

GENERATORS = ("pcg64", "uber")
"""How a table is drawn: neuroevo's chunked PCG64 streams, or Uber's ``RandomState.randn``."""

_FORMAT_VERSION = 1
_HEADER_BYTES = 128  # the .npy header of a 1-D float32 array

CHECK_SAMPLES = 4096
"""Values, spread evenly over a cached table, whose hash its ``.check`` file records."""


def _whole_number(value: object) -> bool:
    """True for ints and for floats without a fraction (``1e8`` from a YAML config)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return False
    return math.isfinite(value) and int(value) == value


def _remove_stale_temp_files(path: Path) -> None:
    """Deletes temp files of ``path`` left by processes that no longer run (killed mid-write)."""
    for tmp in path.parent.glob(f"{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 1 : -len(".tmp")].removeprefix("check.")
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except PermissionError:  # alive, owned by another user
            pass


def default_cache_dir() -> Path:
    """Returns the directory where noise tables are cached (see the module docstring)."""
    root = os.environ.get("NEUROEVO_CACHE")
    if root:
        return Path(root).expanduser() / "noise"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "neuroevo" / "noise"


def cache_path(
    seed: int,
    size: int,
    cache_dir: str | os.PathLike[str] | None = None,
    generator: str = "pcg64",
) -> Path:
    """The file that caches the table of ``(seed, size, generator)`` in ``cache_dir`` (None:
    the default directory); it need not exist yet."""
    directory = default_cache_dir() if cache_dir is None else Path(cache_dir)
    kind = "" if generator == "pcg64" else f"_{generator}"
    return directory / f"noise_v{_FORMAT_VERSION}{kind}_seed{seed}_size{size}.npy"


def file_bytes(size: int) -> int:
    """Bytes of the cached file of a table of ``size`` floats."""
    return 4 * size + _HEADER_BYTES


def _sample_positions(size: int) -> np.ndarray:
    """int64: the positions whose values a table's ``.check`` file hashes (the last included)."""
    return np.unique(np.linspace(0, size - 1, min(size, CHECK_SAMPLES)).astype(np.int64))


def _sample_digest(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, np.float32).tobytes()).hexdigest()


def check_file_path(path: Path) -> Path:
    """The ``.check`` file beside the cached table ``path``."""
    return path.with_name(path.name + ".check")


def table_problem(path: Path, size: int) -> str | None:
    """Why the cached table at ``path`` cannot be used as a table of ``size`` floats (wrong
    dtype or length, a file cut short, values that differ from its ``.check`` file), or None
    if it can. A table without a ``.check`` file (written by an older neuroevo) is checked by
    its header and size only."""
    try:
        with open(path, "rb") as handle:
            if np.lib.format.read_magic(handle) == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
            header = handle.tell()
        actual = path.stat().st_size
    except (OSError, ValueError) as exc:
        return f"its header cannot be read ({exc})"
    if dtype != np.float32 or shape != (size,) or fortran:
        return f"it holds {dtype} {shape}, expected float32 ({size},)"
    if actual != header + 4 * size:
        return f"it is {actual:,} bytes, expected {header + 4 * size:,} (cut short?)"
    try:
        record = json.loads(check_file_path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return f"its check file cannot be read ({exc})"
    if record.get("bytes") != actual:
        return f"it is {actual:,} bytes but was written with {record.get('bytes')}"
    # Positional reads, not a memory map: mapping the whole table here could fail under an
    # address-space limit that the table's own mapping is about to report clearly.
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            values = b"".join(os.pread(fd, 4, header + 4 * int(i)) for i in _sample_positions(size))
        finally:
            os.close(fd)
    except OSError as exc:
        return f"it cannot be read ({exc})"
    digest = _sample_digest(np.frombuffer(values, np.float32))
    if digest != record.get("sample_sha256"):
        return "its sampled values differ from those it was written with (corrupt)"
    return None


def _chunk_seeds(seed: int, size: int) -> list[np.random.SeedSequence]:
    return np.random.SeedSequence(seed).spawn(-(-size // CHUNK_SIZE))


def _fill(
    out: np.ndarray, first_chunk: int, seeds: list[np.random.SeedSequence], pool: ThreadPoolExecutor
) -> None:
    """Fills ``out`` with the table's values from chunk ``first_chunk`` on, chunks in parallel."""

    def fill_chunk(chunk: int) -> None:
        part = out[chunk * CHUNK_SIZE : (chunk + 1) * CHUNK_SIZE]
        rng = np.random.Generator(np.random.PCG64(seeds[first_chunk + chunk]))
        rng.standard_normal(dtype=np.float32, out=part)

    # list() re-raises any worker exception here.
    list(pool.map(fill_chunk, range(-(-out.size // CHUNK_SIZE))))


def _fill_uber(out: np.ndarray, state: np.random.RandomState) -> None:
    """Fills ``out`` with the next ``out.size`` values of ``state.randn``, cast to float32 a
    chunk at a time (the float64 draws of a whole 1 GB table would need 2 GB)."""
    for start in range(0, out.size, CHUNK_SIZE):
        part = out[start : start + CHUNK_SIZE]
        part[:] = state.randn(part.size)


_PLACE_FIX = (
    "point the cache at a writable directory with NEUROEVO_CACHE=DIR (or noise.cache_dir / "
    "NoiseTable(cache_dir=...))"
)
_SPACE_FIX = (
    "free some space, use a smaller noise.size, or move the cache with NEUROEVO_CACHE=DIR "
    "(or noise.cache_dir / NoiseTable(cache_dir=...))"
)


class NoiseTable:
    """A read-only float32 N(0, 1) table, identical for everyone with the same seed and size.

    Thread-safe for reading; share one instance between all evaluation threads.

    Args:
        seed: Non-negative integer that determines every value in the table.
        size: Number of float32 values (4 bytes each). The papers use 250M (1 GB); tests use a
            few million. Must be at least the number of parameters of the model it serves.
        cache_dir: Directory of the on-disk cache; ``None`` uses :func:`default_cache_dir`;
            ``False`` keeps the table in memory only (generated anew by each process).
        num_threads: Threads used to generate the table; defaults to the number of CPUs.
        generator: ``"pcg64"`` (neuroevo's table) or ``"uber"`` (Uber's
            ``RandomState(seed).randn(size)``, generated on one thread; seed below 2**32).

    Raises:
        ValueError: If ``seed`` is negative (or too large for ``generator="uber"``), the
            generator is unknown, ``size`` is not positive, the table does not fit
            the free disk (cached) or the available memory (``cache_dir=False``) (the message
            says how much is needed and free, checked before anything is written), or the
            table must be (re)generated in a cache directory where nothing can be written (a
            read-only mount, a regular file). A cached table of the wrong size or content is
            regenerated, with a ``UserWarning``.
        ResourceError: The disk filled up while the table was written (the temp file is
            removed) or the table cannot be memory-mapped (``ulimit -v``).

    Example:
        >>> table = NoiseTable(seed=0, size=1_000_000, cache_dir=False)
        >>> table.get(10, 3).shape
        (3,)
    """

    def __init__(
        self,
        seed: int = 0,
        size: int = DEFAULT_SIZE,
        cache_dir: str | os.PathLike[str] | Literal[False] | None = None,
        num_threads: int | None = None,
        generator: str = "pcg64",
    ) -> None:
        if not _whole_number(seed) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        if generator not in GENERATORS:
            raise ValueError(
                f"generator must be one of {', '.join(map(repr, GENERATORS))}, got {generator!r}"
            )
        if generator == "uber" and seed >= 2**32:
            raise ValueError(f"generator 'uber' (RandomState) needs a seed < 2**32, got {seed}")
        if not _whole_number(size) or size < 1:
            raise ValueError(f"size must be a positive integer number of floats, got {size!r}")
        if cache_dir is not False and cache_dir is not None and os.fspath(cache_dir) == "":
            raise ValueError(
                "cache_dir '' would cache the table in the working directory; give a directory, "
                "None for the default cache or False for memory only"
            )
        self._seed = int(seed)
        self._size = int(size)
        self._num_threads = num_threads or os.cpu_count() or 1
        self._generator = generator
        self._path: Path | None = None
        self.generated = False
        """True if this instance generated the table, False if it mapped a cached file."""
        nbytes = 4 * self._size
        if cache_dir is False:
            check_memory(nbytes, "the in-memory noise table", "use a smaller noise.size")
            data = np.empty(self._size, dtype=np.float32)
            if generator == "uber":
                _fill_uber(data, np.random.RandomState(self._seed))
            else:
                with ThreadPoolExecutor(max_workers=self._num_threads) as pool:
                    _fill(data, 0, _chunk_seeds(self._seed, self._size), pool)
            self.generated = True
        else:
            self._path = cache_path(self._seed, self._size, cache_dir, generator)
            if not self._path.exists():
                check_writable(self._path.parent, "the noise table", _PLACE_FIX)
                check_disk(self._path.parent, file_bytes(self._size), "the noise table", _SPACE_FIX)
            data = self._load_or_generate(self._path)
        data.flags.writeable = False
        self._data: np.ndarray = data

    def _load_or_generate(self, path: Path) -> np.ndarray:
        """Maps the cached table at ``path``, generating it first if no process has yet.

        The lock file only serialises generation and is removed afterwards, also on errors. A
        process that still waits on a removed lock may then generate the table once more
        beside another one: both write identical bytes to their own temp file and rename it
        atomically, so nothing is corrupted.
        """
        problem = table_problem(path, self._size) if path.exists() else None
        if problem is not None:
            warnings.warn(
                f"the cached noise table {path} cannot be used: {problem}; regenerating it",
                stacklevel=3,
            )
        if problem is not None or not path.exists():
            lock_path = path.with_suffix(".lock")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open_no_follow(lock_path, append=True) as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    # Another process may have finished (or repaired it) meanwhile.
                    if not path.exists() or table_problem(path, self._size) is not None:
                        self._generate_file(path)
                        self.generated = True
            except OSError as exc:
                if isinstance(exc, ResourceError) or is_out_of_space(exc):
                    raise
                why = "" if problem is None else f" (the cached one cannot be used: {problem})"
                raise ValueError(
                    f"cannot write the noise table {path}{why}: {exc.strerror or exc}; {_PLACE_FIX}"
                ) from None
            finally:
                with contextlib.suppress(OSError):
                    lock_path.unlink(missing_ok=True)
        try:
            data = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError) and exc.errno != errno.ENOMEM:
                raise
            if isinstance(exc, ValueError) and "mmap" not in str(exc):
                raise
            raise ResourceError(
                f"cannot map the noise table {path} ({format_bytes(4 * self._size)}) into "
                f"memory: {exc}; raise the address-space limit (ulimit -v) or use a smaller "
                "noise.size",
                errno.ENOMEM,
            ) from None
        if data.dtype != np.float32 or data.shape != (self._size,):  # replaced meanwhile
            raise ValueError(
                f"cached noise table {path} holds {data.dtype} {data.shape}, expected float32 "
                f"({self._size},); delete the file so it is regenerated"
            )
        return np.asarray(data)

    def _generate_file(self, path: Path) -> None:
        """Writes the table to a temp file, fsyncs it and renames it to ``path`` atomically.

        Space is reserved up front and the values are written with ordinary writes, a few
        chunks at a time: a full disk is an ``OSError`` here (raised as ``ResourceError``),
        never a ``SIGBUS`` from a memory-mapped page, and the temp file is always removed.
        """
        _remove_stale_temp_files(path)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        seeds = _chunk_seeds(self._seed, self._size)
        uber_state = np.random.RandomState(self._seed) if self._generator == "uber" else None
        batch = max(1, self._num_threads)
        positions = _sample_positions(self._size)
        sample = np.empty(positions.size, np.float32)
        check_path = check_file_path(path)
        check_tmp = check_path.with_name(f"{check_path.name}.{os.getpid()}.tmp")
        try:
            with (
                atomic_write(path, tmp) as handle,
                ThreadPoolExecutor(max_workers=batch) as pool,
            ):
                header = {"descr": "<f4", "fortran_order": False, "shape": (self._size,)}
                np.lib.format.write_array_header_1_0(handle, header)
                handle.flush()
                with contextlib.suppress(OSError):  # file systems without fallocate
                    os.posix_fallocate(handle.fileno(), 0, handle.tell() + 4 * self._size)
                buffer = np.empty(min(self._size, batch * CHUNK_SIZE), np.float32)
                for first in range(0, len(seeds), batch):
                    count = min(self._size - first * CHUNK_SIZE, buffer.size)
                    if uber_state is not None:  # sequential: batches come in table order
                        _fill_uber(buffer[:count], uber_state)
                    else:
                        _fill(buffer[:count], first, seeds, pool)
                    start = first * CHUNK_SIZE
                    inside = (positions >= start) & (positions < start + count)
                    sample[inside] = buffer[positions[inside] - start]
                    handle.write(memoryview(buffer[:count]).cast("B"))
                record = {"bytes": handle.tell(), "sample_sha256": _sample_digest(sample)}
                # Renamed before the table: a table implies its check.
                with atomic_write(check_path, check_tmp) as check:
                    check.write((json.dumps(record) + "\n").encode())
        except OSError as exc:
            if not is_out_of_space(exc):
                raise
            raise out_of_space_error(
                exc,
                path,
                "run again (or use a smaller noise.size, or move the cache with "
                "NEUROEVO_CACHE=DIR or noise.cache_dir / NoiseTable(cache_dir=...))",
                f"the noise table {path} ({format_bytes(4 * self._size)})",
            ) from None

    @property
    def seed(self) -> int:
        """The seed the table was generated from."""
        return self._seed

    @property
    def generator(self) -> str:
        """How the table was drawn (see :data:`GENERATORS`)."""
        return self._generator

    @property
    def path(self) -> Path | None:
        """The cached file, or ``None`` for an in-memory table."""
        return self._path

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        where = self._path if self._path else "memory"
        kind = "" if self._generator == "pcg64" else f", generator={self._generator!r}"
        return f"NoiseTable(seed={self._seed}, size={self._size}{kind}, at={where})"

    def get(self, index: int, length: int) -> np.ndarray:
        """Returns ``length`` consecutive values starting at ``index``, without copying.

        Args:
            index: First position, ``0 <= index <= len(self) - length``.
            length: Number of values, usually the model's parameter count.

        Returns:
            float32 [length], a read-only view into the table.

        Raises:
            ValueError: If the slice does not lie inside the table.
        """
        if index < 0 or length < 0 or index + length > self._size:
            raise ValueError(
                f"noise slice [{index}, {index + length}) is outside the table of size "
                f"{self._size}; use an index from sample_index() for this length"
            )
        return self._data[index : index + length]

    def sample_index(self, rng: np.random.Generator, length: int) -> int:
        """Draws a uniformly random start index for a slice of ``length`` values.

        Args:
            rng: The caller's generator (no global RNG is used).
            length: Slice length, usually the model's parameter count.

        Returns:
            An index ``i`` with ``0 <= i <= len(self) - length``.

        Raises:
            ValueError: If the table is shorter than ``length``.
        """
        return int(self.sample_indices(rng, length, 1)[0])

    def sample_indices(self, rng: np.random.Generator, length: int, count: int) -> np.ndarray:
        """Draws ``count`` start indices at once (see :meth:`sample_index`).

        Returns:
            int64 [count].

        Raises:
            ValueError: If the table is shorter than ``length``.
        """
        if length > self._size:
            raise ValueError(
                f"noise table of size {self._size} is smaller than one parameter vector "
                f"({length} values); create the NoiseTable with size >= {length}"
            )
        return rng.integers(0, self._size - length + 1, size=count, dtype=np.int64)
