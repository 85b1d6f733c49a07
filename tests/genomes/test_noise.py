"""neuroevo.genomes.noise: determinism, views, bounds, and the cross-process file cache."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from read_only import read_only_directory

from neuroevo.genomes.noise import (
    CHUNK_SIZE,
    NoiseTable,
    cache_path,
    check_file_path,
    default_cache_dir,
    table_problem,
)

SIZE = 2 * CHUNK_SIZE + 1234  # Crosses two chunk boundaries and ends in a partial chunk.


@pytest.fixture(scope="module")
def table() -> NoiseTable:
    return NoiseTable(seed=7, size=SIZE, cache_dir=False)


def test_same_seed_gives_same_table_regardless_of_threads(table: NoiseTable) -> None:
    again = NoiseTable(seed=7, size=SIZE, cache_dir=False, num_threads=1)
    np.testing.assert_array_equal(table.get(0, SIZE), again.get(0, SIZE))


def test_other_seed_differs_and_smaller_table_is_prefix(table: NoiseTable) -> None:
    other = NoiseTable(seed=8, size=1000, cache_dir=False)
    assert not np.array_equal(table.get(0, 1000), other.get(0, 1000))
    prefix = NoiseTable(seed=7, size=CHUNK_SIZE + 10, cache_dir=False)
    np.testing.assert_array_equal(prefix.get(0, CHUNK_SIZE + 10), table.get(0, CHUNK_SIZE + 10))


def test_values_are_standard_normal_float32(table: NoiseTable) -> None:
    values = table.get(0, SIZE)
    assert values.dtype == np.float32 and len(table) == SIZE and table.seed == 7
    assert abs(values.mean()) < 3e-3 and abs(values.std() - 1) < 3e-3
    # Chunks are independent streams, not copies of one another.
    assert not np.array_equal(values[:100], values[CHUNK_SIZE : CHUNK_SIZE + 100])


def test_get_returns_read_only_view(table: NoiseTable) -> None:
    view = table.get(5, 10)
    assert view.shape == (10,) and not view.flags.writeable
    assert np.shares_memory(view, table.get(0, 100))
    with pytest.raises(ValueError, match="outside the table"):
        table.get(SIZE - 5, 10)
    with pytest.raises(ValueError, match="outside the table"):
        table.get(-1, 10)


def test_sample_index_is_seeded_and_in_range(table: NoiseTable) -> None:
    first = table.sample_indices(np.random.default_rng(3), SIZE - 10, 1000)
    second = table.sample_indices(np.random.default_rng(3), SIZE - 10, 1000)
    np.testing.assert_array_equal(first, second)
    assert first.min() >= 0 and first.max() <= 10 and first.dtype == np.int64
    assert isinstance(table.sample_index(np.random.default_rng(0), 100), int)
    with pytest.raises(ValueError, match="smaller than one parameter vector"):
        table.sample_index(np.random.default_rng(0), SIZE + 1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"seed": -1}, "seed must be a non-negative integer"),
        ({"size": 0}, "size must be"),
        ({"cache_dir": ""}, "cache_dir '' would cache the table in the working directory"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        NoiseTable(**{"size": 10, "cache_dir": False, **kwargs})


def test_default_cache_dir_follows_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("NEUROEVO_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "noise"
    table = NoiseTable(seed=1, size=1000)
    assert table.path is not None and table.path.parent == tmp_path / "noise"
    monkeypatch.delenv("NEUROEVO_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "neuroevo" / "noise"


def _run(code: str) -> subprocess.Popen:
    """Starts a Python subprocess running ``code`` (stdout piped)."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True
    )


def test_second_process_maps_cached_file_instead_of_regenerating(tmp_path) -> None:
    table = NoiseTable(seed=3, size=1_000_000, cache_dir=tmp_path)
    assert table.generated and table.path is not None and table.path.exists()
    np.testing.assert_array_equal(
        table.get(0, 1000), NoiseTable(3, 1_000_000, cache_dir=False).get(0, 1000)
    )
    mtime = table.path.stat().st_mtime_ns
    child = _run(
        f"""
        from neuroevo.genomes.noise import NoiseTable
        table = NoiseTable(seed=3, size=1_000_000, cache_dir={str(tmp_path)!r})
        print(table.generated, repr(float(table.get(123_456, 1)[0])))
        """
    )
    out, _ = child.communicate(timeout=600)
    assert child.returncode == 0
    assert out.split() == ["False", repr(float(table.get(123_456, 1)[0]))]
    assert table.path.stat().st_mtime_ns == mtime
    assert not list(tmp_path.glob("*.tmp"))


def test_process_waits_for_lock_holder_and_maps_its_file(tmp_path) -> None:
    # Another process is generating: it holds the lock and publishes the file when done.
    source = NoiseTable(seed=5, size=100_000, cache_dir=tmp_path / "other")
    assert source.path is not None
    target = tmp_path / source.path.name
    with open(target.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        child = _run(
            f"""
            from neuroevo.genomes.noise import NoiseTable
            table = NoiseTable(seed=5, size=100_000, cache_dir={str(tmp_path)!r})
            print(table.generated, repr(float(table.get(99_999, 1)[0])))
            """
        )
        time.sleep(0.5)
        assert child.poll() is None  # Blocked on the lock, not generating its own copy.
        os.replace(source.path, target)
        fcntl.flock(lock, fcntl.LOCK_UN)
    out, _ = child.communicate(timeout=600)
    assert child.returncode == 0
    assert out.split() == ["False", repr(float(source.get(99_999, 1)[0]))]


@pytest.mark.parametrize(
    "damage",
    ["truncate", "wrong_shape", "flip_values", "short_header"],
)
def test_a_damaged_cached_table_is_regenerated_with_a_warning(tmp_path, damage, rng) -> None:
    seed = int(rng.integers(2**31))  # the rng fixture prints its own seed for a replay
    want = NoiseTable(seed=seed, size=50_000, cache_dir=False).get(0, 50_000).copy()
    path = NoiseTable(seed=seed, size=50_000, cache_dir=tmp_path).path
    assert path is not None and check_file_path(path).is_file()
    raw = bytearray(path.read_bytes())
    if damage == "truncate":  # a copy cut short: was "raise the address-space limit"
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "wrong_shape":
        np.save(path, np.zeros(49_999, dtype=np.float32))
    elif damage == "flip_values":  # same size, other values where the check samples
        values = np.frombuffer(raw, np.float32, offset=len(raw) - 4 * 50_000).copy()
        values[-1] += 1
        path.write_bytes(bytes(raw[: len(raw) - 4 * 50_000]) + values.tobytes())
    else:
        path.write_bytes(raw[:10])
    with pytest.warns(UserWarning, match=r"cannot be used: .*; regenerating it"):
        table = NoiseTable(seed=seed, size=50_000, cache_dir=tmp_path)
    assert table.generated
    np.testing.assert_array_equal(table.get(0, 50_000), want)
    assert table_problem(path, 50_000) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, check_file_path(path).name]


def test_a_table_without_check_file_is_accepted_by_size(tmp_path) -> None:
    path = NoiseTable(seed=4, size=10_000, cache_dir=tmp_path).path
    check_file_path(path).unlink()  # as written by an older neuroevo
    assert table_problem(path, 10_000) is None
    assert not NoiseTable(seed=4, size=10_000, cache_dir=tmp_path).generated
    path.write_bytes(path.read_bytes()[:-4])
    assert "cut short" in table_problem(path, 10_000)


def test_a_cache_dir_that_is_a_file_is_one_clear_error(tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"is a file, not a directory; point the cache"):
        NoiseTable(seed=1, size=1000, cache_dir=tmp_path / "file")
    with pytest.raises(ValueError, match=r"is a file, not a directory"):
        NoiseTable(seed=1, size=1000, cache_dir=tmp_path / "file" / "below")
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_a_read_only_cache_dir_is_one_clear_error(tmp_path) -> None:
    with (
        read_only_directory(tmp_path / "cache") as cache,
        pytest.raises(ValueError, match=r"cannot write the noise table: .*point the cache"),
    ):
        NoiseTable(seed=1, size=1000, cache_dir=cache)


def test_a_damaged_table_in_a_read_only_cache_says_why_and_what_to_do(tmp_path) -> None:
    def damaged_table(directory: Path) -> None:
        path = NoiseTable(seed=6, size=1000, cache_dir=directory).path
        path.write_bytes(path.read_bytes()[:200])

    with (
        read_only_directory(tmp_path / "cache", damaged_table) as cache,
        pytest.warns(UserWarning),
        pytest.raises(ValueError, match=r"cut short.*writable"),
    ):
        NoiseTable(seed=6, size=1000, cache_dir=cache)


def test_a_link_at_the_lock_file_is_not_followed(tmp_path) -> None:
    """The lock is opened without following a link: a link planted at its name cannot make
    the table's generation create (or touch) another file."""
    cache, elsewhere = tmp_path / "noise", tmp_path / "elsewhere"
    cache.mkdir()
    elsewhere.mkdir()
    lock = cache_path(7, 1000, cache).with_suffix(".lock")
    lock.symlink_to(elsewhere / "created")
    with pytest.raises(ValueError, match=r"cannot write the noise table .*symbolic links"):
        NoiseTable(seed=7, size=1000, cache_dir=cache)
    assert list(elsewhere.iterdir()) == []
