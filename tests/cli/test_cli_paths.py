"""Paths that stop being writable, and files that cannot be written, in real subprocesses:
each ends in one ``error:`` line and exit code 2, leaves no partial file, and what it says to
do works (the interrupted run resumes)."""

from __future__ import annotations

import contextlib
import csv
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from neuroevo.run.video import VideoError, VideoFile

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny_atari.yaml")


def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    """Runs ``python -m args...`` from the repository with extra environment ``env``."""
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", **env},
        timeout=600,
    )


def error_lines(stderr: str) -> list[str]:
    """The ``error:`` lines of ``stderr`` (TensorFlow may log start-up lines of its own on
    some CPUs; those are not ours to test here)."""
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@contextlib.contextmanager
def unwritable(run_dir: Path) -> Iterator[None]:
    """Makes ``run_dir`` and its files unwritable while a run is writing them: immutable
    (``chattr +i``) as root, whom permissions do not stop, ``chmod a-w`` otherwise. Writes
    then fail with EPERM or EACCES, as on a directory made read-only mid-run."""
    paths = [run_dir, *run_dir.rglob("*")]
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", *map(str, paths)], capture_output=True)
        if done.returncode != 0:
            subprocess.run(["chattr", "-i", *map(str, paths)], capture_output=True)
            pytest.skip(f"chattr +i is not supported here: {done.stderr.decode().strip()}")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", *map(str, paths)], check=True)
        return
    modes = {path: path.stat().st_mode for path in paths}
    for path, mode in modes.items():
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        yield
    finally:
        for path, mode in modes.items():
            path.chmod(mode)


@pytest.mark.slow
def test_a_run_dir_made_unwritable_mid_run_is_one_line_then_resumes(tmp_path) -> None:
    run_dir = tmp_path / "run"
    args = ["--config", TINY, "--set", f"noise.cache_dir={tmp_path}/noise", "--quiet"]
    command = [sys.executable, "-m", "neuroevo.train", *args, "--run-dir", str(run_dir)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    # Many generations, so the run is still writing when the directory stops being writable.
    command += ["--set", "budget.generations=1000"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    first = run_dir / "checkpoints" / "ckpt-000001" / "MANIFEST"
    deadline = time.monotonic() + 300
    while not first.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.exists(), process.stderr.read() if process.poll() is not None else "slow"
    with unwritable(run_dir):
        _, stderr = process.communicate(timeout=300)
        leftovers = list(run_dir.glob(".*.tmp"))
    assert process.returncode == 2, stderr
    (line,) = error_lines(stderr)
    assert line.startswith("error: cannot write the run's files: [Errno")
    assert line.endswith(f"make {run_dir} writable again, then resume with --resume {run_dir}")
    assert stderr.rstrip().endswith(line)
    assert not leftovers
    with (run_dir / "metrics.csv").open() as handle:
        done = len(list(csv.DictReader(handle)))
    resumed = cli("neuroevo.train", "--resume", str(run_dir), "--quiet", "--set",
                  f"budget.generations={done + 1}")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    with (run_dir / "metrics.csv").open() as handle:
        assert [int(row["generation"]) for row in csv.DictReader(handle)] == list(range(done + 1))


def test_doctor_with_a_file_as_its_cache_is_one_line(tmp_path) -> None:
    cache = tmp_path / "cache"
    cache.write_text("a file, not a directory\n")
    done = cli("neuroevo.doctor", NEUROEVO_CACHE=str(cache))
    assert done.returncode == 2
    assert done.stdout == ""
    assert error_lines(done.stderr) == [
        f"error: the neuroevo cache {cache} is a file, not a directory; point NEUROEVO_CACHE at "
        "a directory (or unset it to use ~/.cache/neuroevo)"
    ]


def test_doctor_with_a_bogus_option_is_one_line() -> None:
    done = cli("neuroevo.doctor", "--bogus")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "error: python -m neuroevo.doctor: unrecognized arguments: --bogus (see --help)\n"
    )


def frames(count: int, seed: int) -> list[np.ndarray]:
    """``count`` random 16x24 RGB frames: a video small enough to write in a moment."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (16, 24, 3), dtype=np.uint8) for _ in range(count)]


def test_a_video_file_holds_every_frame(tmp_path) -> None:
    imageio = pytest.importorskip("imageio.v2")
    path = tmp_path / "v.mp4"
    with VideoFile(path, fps=15) as video:
        for frame in frames(7, seed=0):
            video.append(frame)
    reader = imageio.get_reader(path)
    assert reader.count_frames() == 7
    assert reader.get_data(0).shape == (16, 24, 3)


def test_a_video_ffmpeg_cannot_finish_is_one_error_and_no_file(tmp_path, monkeypatch) -> None:
    """ffmpeg failing at the end (a full disk while closing the file) is an error, never a
    truncated video: imageio's own writer ignores ffmpeg's exit status."""
    import imageio_ffmpeg

    fake = tmp_path / "ffmpeg"
    fake.write_text(
        "#!/bin/sh\n"
        'for last; do :; done\necho partial > "$last"\ncat > /dev/null\n'
        "echo '[out#0/mp4] Error closing file: No space left on device' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(imageio_ffmpeg, "get_ffmpeg_exe", lambda: str(fake))
    path = tmp_path / "v.mp4"
    with (
        pytest.raises(VideoError, match=r"\(\[out#0/mp4\] Error closing file: No space left"),
        VideoFile(path, fps=15) as video,
    ):
        for frame in frames(3, seed=1):
            video.append(frame)
    assert not path.exists()
