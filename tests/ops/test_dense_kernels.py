"""The dense layers' float32 kernels (custom_ops/core/kernels.h) give the same bits on every
vector width: this machine's native build, the AVX2 + FMA build (x86-64-v3) and, where a cross
compiler and qemu-user are installed, aarch64 NEON. So a genome scores the same on any of these
CPUs (a run resumed on another machine, a Ray cluster of mixed nodes). Each build is also
checked against float64."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from benchmarks.dense import compile_driver
from neuroevo.ops import build

DRIVER = Path(__file__).resolve().parents[1] / "dense_kernels_driver.cc"
# (in, rows): vector bodies with and without tails, 4-row groups with and without leftover rows;
# 11 and 376 are Hopper's and Humanoid's observation sizes.
CASES = [(1, 3), (11, 64), (15, 5), (16, 4), (17, 7), (33, 9), (64, 64), (100, 3), (376, 64)]


def _compile(compiler: str, march: str, output: Path, *extra: str) -> subprocess.CompletedProcess:
    return compile_driver(DRIVER, march, output, *extra, compiler=compiler)


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> tuple[Path, list[tuple[np.ndarray, np.ndarray]]]:
    seed = 20261205
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    path = tmp_path_factory.mktemp("dense") / "in"
    data = []
    with path.open("wb") as f:
        f.write(np.int64(len(CASES)).tobytes())
        for n_in, rows in CASES:
            x = rng.standard_normal(n_in).astype(np.float32)
            w = rng.standard_normal((rows, n_in)).astype(np.float32)
            f.write(np.array([n_in, rows], np.int64).tobytes())
            f.write(x.tobytes())
            f.write(w.tobytes())
            data.append((x, w))
    return path, data


def _run(command: list, cases_path: Path, out: Path) -> bytes:
    done = subprocess.run([*command, cases_path, out], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out.read_bytes()


def _check_float64(result: bytes, data: list[tuple[np.ndarray, np.ndarray]]) -> None:
    values = np.frombuffer(result, np.float32)
    at = 0
    for x, w in data:
        rows, n_in = w.shape
        dot = values[at : at + rows]
        axpy = values[at + rows : at + 2 * rows]
        at += 2 * rows
        want = w.astype(np.float64) @ x.astype(np.float64)
        np.testing.assert_allclose(dot, want, rtol=1e-5, atol=1e-5 * np.sqrt(n_in))
        # AxpyCols reads the same numbers as [in, rows]: w.reshape(in, rows).
        want = x.astype(np.float64) @ w.reshape(n_in, rows).astype(np.float64)
        np.testing.assert_allclose(axpy, want, rtol=1e-5, atol=1e-5 * np.sqrt(n_in))
    assert at == values.size


def _has_avx2_fma() -> bool:
    return {"avx2", "fma"} <= set(build._cpu_flags().split())


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the -march values are x86-64 ones")
@pytest.mark.skipif(
    platform.machine() == "x86_64" and not _has_avx2_fma(), reason="the CPU lacks AVX2 or FMA"
)
def test_native_and_avx2_builds_give_the_same_bits(cases, tmp_path):
    cases_path, data = cases
    results = {}
    for march in ("native", "x86-64-v3"):
        driver = tmp_path / f"driver-{march}"
        done = _compile(build._compiler(), march, driver)
        assert done.returncode == 0, done.stderr
        results[march] = _run([driver], cases_path, tmp_path / f"out-{march}")
        _check_float64(results[march], data)
    assert results["native"] == results["x86-64-v3"]


def test_aarch64_neon_build_gives_the_same_bits(cases, tmp_path):
    compiler = shutil.which("aarch64-linux-gnu-g++")
    qemu = shutil.which("qemu-aarch64")
    if compiler is None or qemu is None:
        pytest.skip("needs g++-aarch64-linux-gnu and qemu-user (installed by .ci/run)")
    cases_path, data = cases
    driver = tmp_path / "driver-aarch64"
    done = _compile(compiler, "armv8-a", driver, "-static")
    assert done.returncode == 0, done.stderr
    result = _run([qemu, driver], cases_path, tmp_path / "out-neon")
    _check_float64(result, data)
    if platform.machine() == "x86_64" and _has_avx2_fma():
        native = tmp_path / "driver-native"
        assert _compile(build._compiler(), "native", native).returncode == 0
        assert result == _run([native], cases_path, tmp_path / "out-native")
