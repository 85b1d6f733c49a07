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
- **No copies.** :meth:`NoiseTable.get` returns a read-only view into the table.

The cache lives in ``$NEUROEVO_CACHE/noise`` if that variable is set, else
``$XDG_CACHE_HOME/neuroevo/noise``, else ``~/.cache/neuroevo/noise``. POSIX only (``fcntl``).
"""

from __future__ import annotations

import fcntl
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np

__all__ = ["CHUNK_SIZE", "DEFAULT_SIZE", "NoiseTable", "default_cache_dir"]

DEFAULT_SIZE = 250_000_000
"""Table size used by the papers: 250M float32 values, 1 GB."""

CHUNK_SIZE = 1 << 22
"""Floats per independently seeded chunk. Part of the table's definition: changing it changes
every table, so it is fixed, not a parameter."""

_FORMAT_VERSION = 1


def default_cache_dir() -> Path:
    """Returns the directory where noise tables are cached (see the module docstring)."""
    root = os.environ.get("NEUROEVO_CACHE")
    if root:
        return Path(root).expanduser() / "noise"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "neuroevo" / "noise"


def _fill(out: np.ndarray, seed: int, num_threads: int) -> None:
    """Fills ``out`` (float32 [size]) with the table for ``seed``, chunk by chunk in parallel."""
    num_chunks = -(-out.size // CHUNK_SIZE)
    children = np.random.SeedSequence(seed).spawn(num_chunks)

    def fill_chunk(chunk: int) -> None:
        part = out[chunk * CHUNK_SIZE : (chunk + 1) * CHUNK_SIZE]
        rng = np.random.Generator(np.random.PCG64(children[chunk]))
        rng.standard_normal(dtype=np.float32, out=part)

    with ThreadPoolExecutor(max_workers=num_threads) as pool:
        # list() re-raises any worker exception here.
        list(pool.map(fill_chunk, range(num_chunks)))


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

    Raises:
        ValueError: If ``seed`` is negative, ``size`` is not positive, or a cached file does
            not hold a float32 vector of ``size`` values.

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
    ) -> None:
        if int(seed) != seed or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        if int(size) != size or size < 1:
            raise ValueError(f"size must be a positive integer number of floats, got {size!r}")
        self._seed = int(seed)
        self._size = int(size)
        self._num_threads = num_threads or os.cpu_count() or 1
        self._path: Path | None = None
        self.generated = False
        """True if this instance generated the table, False if it mapped a cached file."""
        if cache_dir is False:
            data = np.empty(self._size, dtype=np.float32)
            _fill(data, self._seed, self._num_threads)
            self.generated = True
        else:
            directory = default_cache_dir() if cache_dir is None else Path(cache_dir)
            self._path = directory / f"noise_v{_FORMAT_VERSION}_seed{seed}_size{size}.npy"
            data = self._load_or_generate(self._path)
        data.flags.writeable = False
        self._data: np.ndarray = data

    def _load_or_generate(self, path: Path) -> np.ndarray:
        """Maps the cached table at ``path``, generating it first if no process has yet."""
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.with_suffix(".lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    if not path.exists():  # Another process may have finished meanwhile.
                        self._generate_file(path)
                        self.generated = True
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        data = np.load(path, mmap_mode="r", allow_pickle=False)
        if data.dtype != np.float32 or data.shape != (self._size,):
            raise ValueError(
                f"cached noise table {path} holds {data.dtype} {data.shape}, expected float32 "
                f"({self._size},); delete the file so it is regenerated"
            )
        return np.asarray(data)

    def _generate_file(self, path: Path) -> None:
        """Writes the table to a temp file, fsyncs it and renames it to ``path`` atomically."""
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(self._size,))
            _fill(out, self._seed, self._num_threads)
            out.flush()
            del out
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(tmp, path)
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        finally:
            tmp.unlink(missing_ok=True)

    @property
    def seed(self) -> int:
        """The seed the table was generated from."""
        return self._seed

    @property
    def path(self) -> Path | None:
        """The cached file, or ``None`` for an in-memory table."""
        return self._path

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        where = self._path if self._path else "memory"
        return f"NoiseTable(seed={self._seed}, size={self._size}, at={where})"

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
