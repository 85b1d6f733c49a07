"""``python -m benchmarks dense``: the dense-layer kernel of a policy step alone, per build.

Compiles ``benchmarks/dense_kernels.cc`` (a C++ loop over the networks' layers, one thread)
for this CPU (``native``), AVX2 + FMA (``x86-64-v3``) and the x86-64 baseline, with the op
libraries' flags, and prints the best time of one forward of all networks for the maze /
Hopper-size MLPs, Humanoid-size MLPs and the Atari nets' dense layers. The native and AVX2
builds compute the same bits (tests/ops/test_dense_kernels.py); the baseline, without FMA, its own.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import tempfile
from pathlib import Path

import tensorflow as tf

from benchmarks.common import print_table, write_json
from neuroevo.ops import build

SOURCE = Path(__file__).with_name("dense_kernels.cc")
SHAPES = {
    "200 x 11-64-64-2 (maze, Hopper)": [200, 11, 64, 64, 2],
    "256 x 376-64-64-17 (Humanoid)": [256, 376, 64, 64, 17],
    "32 x 3136-512-18 (Atari dense layers)": [32, 3136, 512, 18],
}


def compile_driver(
    source: Path, march: str, output: Path, *extra: str, compiler: str | None = None
) -> subprocess.CompletedProcess:
    """Compiles a standalone driver of the core kernels as the op libraries are (-O3, C++17,
    the TF headers' Eigen) for ``march``; also used by tests/ops/test_dense_kernels.py."""
    compiler = compiler or build._compiler()
    command = [
        compiler,
        "-std=c++17",
        "-O3",
        *build.arch_flags(march, compiler),
        f"-I{build.source_dir()}",
        f"-isystem{tf.sysconfig.get_include()}",  # Eigen; its own warnings are not ours
        str(source),
        "-o",
        str(output),
        *extra,
    ]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks dense", description=__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="runs per build and shape")
    parser.add_argument("--json", default="bench_results/dense.json")
    args = parser.parse_args(argv)
    marches = ["native"]
    if platform.machine() == "x86_64":
        marches += ["x86-64-v3", "x86-64"]
    rows, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        binaries = {}
        for march in marches:
            binaries[march] = Path(tmp) / f"dense-{march}"
            done = compile_driver(SOURCE, march, binaries[march])
            if done.returncode != 0:
                raise RuntimeError(f"compiling {SOURCE.name} for {march} failed:\n{done.stderr}")
        for name, shape in SHAPES.items():
            times = {m: [] for m in marches}
            for _ in range(args.rounds):
                for march in marches:  # builds interleaved within a round
                    out = subprocess.run(
                        [binaries[march], *map(str, shape)], check=True, capture_output=True
                    )
                    times[march].append(float(out.stdout))
            rows.append([name, *(f"{min(t):,.1f}-{max(t):,.1f}" for t in times.values())])
            results[name] = {"shape": shape, "microseconds": times}
    print_table(
        "Dense kernel alone, one thread: us per forward of all networks (range over rounds)",
        ["networks", *marches],
        rows,
    )
    write_json(args.json, {"dense": results})
    return 0
