"""The Atari op's pixel kernels (custom_ops/atari/atari_kernels.h) on their own: every vector
width computes what NumPy and OpenCV compute (grayscale lookup, max-pool, INTER_AREA resize,
frame stack), for the x86-64 baseline and this machine's native build; and the header
cross-compiles for aarch64 (NEON) when a cross compiler is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

from neuroevo.ops import build

DRIVER = Path(__file__).resolve().parents[1] / "atari_kernels_driver.cc"
VARIANTS = 6  # RunVariant calls in the driver
HEIGHT, WIDTH = 210, 160


def _compile(compiler: str, march: str, output: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [
        compiler,
        "-std=c++17",
        "-O2",
        f"-march={march}",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Wno-psabi",  # the driver also runs widths wider than the target's (lowered by GCC)
        f"-I{build.source_dir()}",
        str(DRIVER),
        "-o",
        str(output),
        *extra,
    ]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def _screens(rng: np.random.Generator, count: int) -> np.ndarray:
    """Even palette indices, with runs of repeated rows like real Atari screens."""
    screens = rng.integers(0, 128, (count, HEIGHT, WIDTH), dtype=np.uint8) * 2
    for screen in screens:
        for y in rng.choice(HEIGHT - 1, 80, replace=False):
            screen[y + 1] = screen[y]
    screens[-1, 100:] = screens[-1, 99]  # a long run of equal rows
    return screens


def _check_driver(command: list, tmp_path: Path, size: int) -> None:
    """Runs the compiled driver (``command`` + its arguments) and compares every variant."""
    rng = np.random.default_rng(size)
    screens = _screens(rng, 5)
    even_gray = rng.integers(0, 256, 128, dtype=np.uint8)
    (tmp_path / "in").write_bytes(screens.tobytes())
    (tmp_path / "palette").write_bytes(even_gray.tobytes())
    run = subprocess.run(
        [*command, tmp_path / "in", tmp_path / "palette", str(size), tmp_path / "out"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr

    gray = even_gray[screens >> 1]
    pooled = np.maximum(gray[:-1], gray[1:])
    resized = np.stack([cv2.resize(g, (size, size), interpolation=cv2.INTER_AREA) for g in gray])
    stack = np.stack([resized[max(0, len(resized) - 4 + k)] for k in range(4)], axis=-1)
    expected = np.concatenate([a.ravel() for a in (gray, pooled, resized, stack)])
    out = np.fromfile(tmp_path / "out", dtype=np.uint8)
    assert out.size == VARIANTS * expected.size
    for variant, got in enumerate(out.reshape(VARIANTS, -1)):
        assert np.array_equal(got, expected), f"variant {variant} (see the driver) differs"


@pytest.fixture(scope="module")
def drivers() -> dict[str, Path]:
    """The driver compiled once per -march (filled on first use)."""
    return {}


@pytest.mark.parametrize("march", ["native", "x86-64"])
@pytest.mark.parametrize("size", [84, 42, 150])
def test_every_width_matches_numpy_and_opencv(tmp_path_factory, tmp_path, drivers, march, size):
    if os.uname().machine != "x86_64":
        pytest.skip("the -march values are x86-64 ones")
    if march not in drivers:
        drivers[march] = tmp_path_factory.mktemp("driver") / f"driver-{march}"
        done = _compile(build._compiler(), march, drivers[march])
        assert done.returncode == 0, done.stderr[-3000:]
    _check_driver([drivers[march]], tmp_path, size)


def test_kernels_cross_compile_for_aarch64_neon(tmp_path):
    """With Debian's g++-aarch64-linux-gnu: the NEON build compiles (tbl byte lookups); with
    qemu-user too, it also computes what NumPy and OpenCV compute."""
    compiler = shutil.which("aarch64-linux-gnu-g++")
    if compiler is None:
        pytest.skip("no aarch64 cross compiler (Debian: apt-get install g++-aarch64-linux-gnu)")
    macros = subprocess.run(
        [compiler, "-march=armv8-a", "-dM", "-E", "-x", "c++", os.devnull],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "__ARM_NEON" in macros  # so the kernels take their 16-byte NEON widths
    driver = tmp_path / "driver-aarch64"
    done = _compile(compiler, "armv8-a", driver, "-static")
    assert done.returncode == 0, done.stderr[-3000:]
    qemu = shutil.which("qemu-aarch64")
    if qemu is None:
        pytest.skip("compiled; running it needs qemu-user (apt-get install qemu-user)")
    _check_driver([qemu, driver], tmp_path, 84)
