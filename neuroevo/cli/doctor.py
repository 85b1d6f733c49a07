"""``python -m neuroevo.doctor``: what a bug report needs to know about this installation.

Prints versions, the instruction set the op libraries target, where each op library is cached,
whether it is current for the installed TensorFlow and sources (and intact: size and sha256
match its manifest) and which instruction set it was built for, the ROM directory, and the
thread settings. ``--build`` compiles any
missing library and ``--rebuild`` recompiles them all, the bench- and test-only libraries
(``atari_bench``, ``mujoco_bench``, ``core_testing``: baselines and test ops that neuroevo itself
never loads) included, which are listed with their purpose. An installed wheel ships no sources
of those: they are listed as not installed and skipped.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
from pathlib import Path

from neuroevo.cli.common import Parser, quiet_tensorflow_start_up, run_command
from neuroevo.core.resources import check_start_up_address_space


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _describe(state: str, path: Path) -> str:
    """``current, built for AVX2 (-march=x86-64-v3: AVX2 FMA SSE4.1)``, or why it is not."""
    from neuroevo.ops import build

    if state == "missing":
        return "not built yet (built on first use)"
    if state == "corrupt":
        return "corrupt: size or sha256 differ from its manifest (rebuilt on first use, or --build)"
    manifest = build.read_manifest(path) or {}
    features = " ".join(manifest.get("features", [])) or "baseline"
    return f"current, built for {manifest.get('isa')} (-march={manifest.get('march')}: {features})"


def main(argv: list[str] | None = None) -> int:
    quiet_tensorflow_start_up()
    parser = Parser(prog="python -m neuroevo.doctor", description=__doc__)
    parser.add_argument("--build", action="store_true", help="build missing op libraries")
    parser.add_argument("--rebuild", action="store_true", help="recompile every op library")
    args = parser.parse_args(argv)
    return run_command(lambda: _report(args))


def _report(args: argparse.Namespace) -> int:
    """The command: prints the report, building or rebuilding the op libraries if asked; 1
    when a part is broken. A cache or address-space limit that cannot be used is one error."""
    import neuroevo
    from neuroevo.ops import build

    build.cache_root()  # a cache that cannot be used is one error, not a report of it

    print(f"neuroevo       {neuroevo.__version__} ({os.path.dirname(neuroevo.__file__)})")
    print(f"python         {platform.python_version()} ({sys.executable})")
    print(f"platform       {platform.platform()}, {os.cpu_count()} logical CPUs")
    for package in ("tensorflow-cpu", "tensorflow", "numpy", "gymnasium", "ale-py", "mujoco"):
        print(f"{package:<14} {_version(package)}")

    check_start_up_address_space()  # TensorFlow aborts in its own code when it cannot map it
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    print(f"GPUs           {[gpu.name for gpu in gpus] or 'none (CPU only)'}")
    print(
        "TF threads     intra-op "
        f"{tf.config.threading.get_intra_op_parallelism_threads() or 'auto'}, inter-op "
        f"{tf.config.threading.get_inter_op_parallelism_threads() or 'auto'}"
    )
    print(f"op cache       {build.cache_root()}")
    try:
        print(f"op sources     {build.source_dir()}")
    except build.OpBuildError as exc:
        print(f"op sources     MISSING: {exc}")
        return 1
    try:
        from ale_py import roms

        print(f"ROM directory  {os.path.dirname(roms.get_rom_path('pong'))}")
    except Exception as exc:  # doctor reports, it does not fail on a broken optional part
        print(f"ROM directory  unavailable ({exc})")

    status = 0
    try:
        isa = build.target_isa()
        features = " ".join(isa["features"]) or "baseline"
        print(f"op target      {isa['isa']} (-march={isa['march']}: {features})")
    except (build.OpBuildError, ValueError) as exc:
        print(f"op target      ERROR: {exc}")
        return 1
    width = max(map(len, build.LIBRARIES))
    for name, spec in build.LIBRARIES.items():
        purpose = "" if spec.purpose == "production" else f"({spec.purpose} only)"
        label = f"{name:<{width}} {purpose:<12}"
        if spec.purpose != "production" and not build.sources_installed(name):
            print(f"op library     {label} not installed (its sources ship in a clone only)")
            continue
        try:
            _, path = build.library_key(name)
            state = build.library_state(path)
            if args.build or args.rebuild:
                if state == "corrupt":
                    print(f"op library     {label} corrupt, rebuilding: {path}")
                build.build_library(name, force=args.rebuild)
                state = build.library_state(path)
            print(f"op library     {label} {_describe(state, path)}: {path}")
        except (build.OpBuildError, ValueError, ImportError) as exc:
            status = 1
            print(f"op library     {label} ERROR: {exc}")
    return status
