"""Resource limits: a full disk, a huge size or a small address space is one clear error.

Limits are simulated without touching the machine: ``RLIMIT_FSIZE`` in a subprocess makes
every write past a size fail like a full disk (``EFBIG``), ``RLIMIT_AS`` (``ulimit -v``) caps
the address space, and a small tmpfs (when running as root) is a really full disk. Each
scenario runs in a subprocess, so a ``SIGBUS`` or segfault fails the test instead of pytest.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from neuroevo.genomes.noise import CHUNK_SIZE, NoiseTable, check_file_path

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter (cwd: the repo) and returns the finished process."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env={**os.environ, "NEUROEVO_CACHE": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_noise_table_larger_than_the_disk_is_refused_before_writing(tmp_path: Path) -> None:
    cache = tmp_path / "noise"
    with pytest.raises(ValueError, match=r"the noise table needs 363\.8 TiB of disk in .* only "):
        NoiseTable(seed=0, size=1e14, cache_dir=cache)
    assert not cache.exists()
    with pytest.raises(ValueError, match="NEUROEVO_CACHE"):
        NoiseTable(seed=0, size=10**14, cache_dir=cache)


@pytest.mark.parametrize("size", [True, "100", math.inf, 2.5, 0])
def test_noise_table_size_must_be_a_whole_number(size) -> None:
    with pytest.raises(ValueError, match="size must be a positive integer number of floats"):
        NoiseTable(seed=0, size=size, cache_dir=False)


def test_in_memory_noise_table_larger_than_memory_is_refused() -> None:
    with pytest.raises(ValueError, match=r"needs 363\.8 TiB of memory but only .* is available"):
        NoiseTable(seed=0, size=10**14, cache_dir=False)


def test_a_failed_write_of_the_noise_table_is_an_error_not_a_bus_error(tmp_path: Path) -> None:
    """Writes past 10 MB fail (EFBIG, as ENOSPC on a full disk); the 20 MB table must fail
    cleanly, naming the file-size limit that stopped it."""
    result = run_python(
        f"""
        import resource, signal
        from neuroevo.genomes.noise import NoiseTable
        from neuroevo.core.resources import ResourceError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (10 << 20, 10 << 20))
        try:
            NoiseTable(seed=1, size=5_000_000, cache_dir={str(tmp_path / "noise")!r})
        except ResourceError as exc:
            print("refused:", exc)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "refused: the file-size limit (ulimit -f, 10.0 MiB) stopped writing the noise table"
        in result.stdout
    )
    assert "raise the limit (ulimit -f unlimited), then run again" in result.stdout
    assert "NEUROEVO_CACHE" in result.stdout
    assert list((tmp_path / "noise").iterdir()) == []  # no temp file, no lock file


def test_small_tmpfs_is_refused_up_front_and_a_failed_write_cleans_up(tmp_path: Path) -> None:
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=50m", "tmpfs", str(mount)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        with pytest.raises(ValueError, match=r"needs 76\.3 MiB of disk in .* but only"):
            NoiseTable(seed=0, size=20_000_000, cache_dir=mount)
        # Past the up-front check (as when another process fills the disk meanwhile).
        result = run_python(
            f"""
            import neuroevo.genomes.noise
            from neuroevo.core.resources import ResourceError
            neuroevo.genomes.noise.check_disk = lambda *args: None
            try:
                neuroevo.genomes.noise.NoiseTable(seed=0, size=20_000_000, cache_dir={str(mount)!r})
            except ResourceError as exc:
                print("refused:", exc)
            """,
            tmp_path,
        )
        assert result.returncode == 0, result.stderr
        assert "refused: disk full while writing the noise table" in result.stdout
        assert list(mount.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_mapping_beyond_the_address_space_limit_is_a_clear_error(tmp_path: Path) -> None:
    cache = tmp_path / "noise"
    NoiseTable(seed=2, size=50_000_000, cache_dir=cache)  # 200 MB file
    result = run_python(
        f"""
        import resource
        from neuroevo.genomes.noise import NoiseTable
        from neuroevo.core.resources import ResourceError
        with open("/proc/self/status") as status:
            vm = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
        limit = (vm << 10) + (64 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            NoiseTable(seed=2, size=50_000_000, cache_dir={str(cache)!r})
        except ResourceError as exc:
            print("refused:", exc)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "refused: cannot map the noise table" in result.stdout
    assert "ulimit -v" in result.stdout


def test_cached_table_equals_the_in_memory_one_and_leaves_no_lock(tmp_path: Path) -> None:
    size = 3 * CHUNK_SIZE + 17  # batches of chunks with a partial last chunk
    memory = NoiseTable(seed=3, size=size, cache_dir=False).get(0, size)
    for threads in (1, 2):
        cache = tmp_path / f"threads{threads}"
        stale = cache / f"noise_v1_seed3_size{size}.npy.999999999.tmp"  # from a killed process
        cache.mkdir()
        stale.write_bytes(b"x")
        table = NoiseTable(seed=3, size=size, cache_dir=cache, num_threads=threads)
        np.testing.assert_array_equal(np.asarray(table.get(0, size)), memory)
        assert sorted(p.name for p in cache.iterdir()) == [
            table.path.name,
            check_file_path(table.path).name,
        ]


def test_a_file_size_limit_while_saving_the_elite_or_metrics_is_one_error(tmp_path: Path) -> None:
    """Writes past 64 KiB fail (``ulimit -f``): one ResourceError naming the limit, not a full
    disk (the disk has room), the old elite kept, no temp file."""
    run = tmp_path / "run"
    result = run_python(
        f"""
        import resource, signal, traceback
        import numpy as np
        from neuroevo.run.run_dir import MetricsWriter, RunDir
        from neuroevo.core.resources import ResourceError
        run = RunDir({str(run)!r})
        run.path.mkdir()
        run.save_elite({{"seeds": [1]}}, np.ones(10, np.float32))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
        for write in (
            lambda: run.save_elite({{"seeds": [2]}}, np.zeros(100_000, np.float32)),
            lambda: MetricsWriter(run.metrics_path).write(
                {{"generation": 0, "note": "x" * (100 << 10)}}
            ),
        ):
            try:
                write()
            except ResourceError as exc:
                assert exc.__context__ is None or exc.__suppress_context__
                print("refused:", exc)
        print("elite seeds:", run.load_elite()[0]["seeds"])
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    limit = "refused: the file-size limit (ulimit -f, 64.0 KiB) stopped writing"
    assert lines[0] == (
        f"{limit} {run / 'elite.npz'}: raise the limit (ulimit -f unlimited), then resume the run"
    )
    assert lines[1].startswith(f"{limit} {run / 'metrics.csv'}: raise the limit")
    assert lines[2] == "elite seeds: [1]"
    assert not (run / ".elite.npz.tmp").exists()


def test_mujoco_slots_beyond_the_address_space_limit_are_refused_not_a_crash(tmp_path) -> None:
    """MuJoCo goes on with a broken mjData when its arena cannot be mapped: the op must refuse
    the pool up front (this used to be a segfault)."""
    result = run_python(
        """
        import resource
        import tensorflow as tf
        from neuroevo.envs.mujoco import MujocoEnv
        MujocoEnv("Hopper", 1)  # load the op library before the limit
        with open("/proc/self/status") as status:
            vm = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
        limit = (vm << 10) + (1 << 30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            MujocoEnv("Humanoid", 4096)
        except tf.errors.ResourceExhaustedError as exc:
            print("refused:", exc.message)
        print("still works:", MujocoEnv("Humanoid", 2).num_slots)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "4096 Humanoid slots need" in result.stdout
    assert "address-space limit (ulimit -v) leaves" in result.stdout
    assert "still works: 2" in result.stdout
