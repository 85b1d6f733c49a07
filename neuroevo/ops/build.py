"""Compiles the C++ op libraries against the TensorFlow installed at run time.

A custom op must be built with the same TensorFlow headers and C++ ABI as the TensorFlow that
loads it, so neuroevo ships C++ sources (``custom_ops/``) and compiles them on first use. Each
library is cached under a key made of everything that changes the binary (TensorFlow version
and flags, compiler, source bytes, linked engine version), so an upgrade or an edit rebuilds it
and nothing else does. A file lock keeps concurrent processes from building the same thing.

ALE (Atari) has no C++ headers in its wheel: we build its core as a static library from the
ale-py source distribution of the installed version (see docs/ARCHITECTURE.md for why).
MuJoCo's wheel ships ``libmujoco`` and its headers, so the MuJoCo op links it directly.

The op libraries are compiled for the CPU they are built on (``-march=native``) unless
``NEUROEVO_MARCH`` names another target (``x86-64-v3`` for AVX2 + FMA, ``x86-64`` for the
baseline, or any ``-march`` value the compiler accepts; ``NEUROEVO_PORTABLE_BUILD=1`` is an
older spelling of ``x86-64``). The target is part of the cache key (for ``native``, with a
digest of this CPU's feature flags, so a cache shared with another kind of machine is rebuilt
rather than loaded with instructions this CPU lacks). Beside each library a JSON manifest
records the target's instruction sets, the file's size and its sha256; a library that does not
match its manifest (truncated, corrupt) is rebuilt instead of being loaded.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from neuroevo.ops.libraries import (
    ENGINES,
    LIBRARIES,
    LibrarySpec,
    OpBuildError,
    discover_libraries,
    source_dir,
)

__all__ = [
    "ENGINES",
    "LIBRARIES",
    "LibrarySpec",
    "OpBuildError",
    "build_library",
    "discover_libraries",
    "library_key",
    "source_dir",
]


def cache_root() -> Path:
    """Where built libraries live: ``$NEUROEVO_CACHE`` or ``~/.cache/neuroevo``.

    Raises:
        ValueError: The path exists but is not a directory (e.g. ``NEUROEVO_CACHE`` names a
            file), so nothing could be built or found there.
    """
    root = Path(os.environ.get("NEUROEVO_CACHE") or Path.home() / ".cache" / "neuroevo")
    if root.exists() and not root.is_dir():
        raise ValueError(
            f"the neuroevo cache {root} is a file, not a directory; point NEUROEVO_CACHE at a "
            "directory (or unset it to use ~/.cache/neuroevo)"
        )
    return root


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Holds an exclusive advisory lock on ``path`` (created if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise OpBuildError(
            f"{what}: `{cmd[0]}` is not installed. On Debian/Ubuntu: "
            "`apt-get install g++ cmake ninja-build zlib1g-dev`."
        ) from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
        raise OpBuildError(f"{what} failed (exit {done.returncode}):\n$ {' '.join(cmd)}\n{tail}")
    return done.stdout


def _compiler() -> str:
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        raise OpBuildError(
            f"no C++ compiler `{cxx}` found; neuroevo compiles its TensorFlow ops on first use. "
            "Install one (Debian/Ubuntu: `apt-get install g++`) or set CXX."
        )
    return cxx


DEFAULT_MARCH = "native"
MARCH_HELP = (
    "native (the default: this machine's CPU), x86-64-v3 (AVX2 + FMA), x86-64 (the baseline "
    "every x86-64 CPU runs) or any other `-march` value your compiler accepts "
    "(`g++ -Q --help=target` lists them)"
)


def target_march() -> str:
    """The ``-march`` value the op libraries are compiled for.

    ``$NEUROEVO_MARCH`` if set, else ``x86-64`` when ``$NEUROEVO_PORTABLE_BUILD`` is set (its
    older spelling of the baseline), else ``native``.

    Raises:
        ValueError: the value is not a plain ``-march`` name, or both variables are set and
            disagree.
    """
    march = os.environ.get("NEUROEVO_MARCH", "").strip()
    portable = os.environ.get("NEUROEVO_PORTABLE_BUILD", "") not in ("", "0")
    if portable and march not in ("", "x86-64"):
        raise ValueError(
            f"NEUROEVO_PORTABLE_BUILD=1 (the x86-64 baseline) contradicts NEUROEVO_MARCH={march}; "
            "unset NEUROEVO_PORTABLE_BUILD (NEUROEVO_MARCH=x86-64 is the same build)."
        )
    march = march or ("x86-64" if portable else DEFAULT_MARCH)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", march):
        raise ValueError(f"NEUROEVO_MARCH={march!r} is not an -march value; use {MARCH_HELP}.")
    return march


def _cpu_flags() -> str:
    """The ``flags`` (x86) or ``Features`` (ARM) line of /proc/cpuinfo (empty where none)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    return ""


@functools.cache
def _target_macros(compiler: str, march: str) -> frozenset[str]:
    """The macros ``compiler -march=<march>`` predefines: the target's instruction sets."""
    probe = [compiler, f"-march={march}", "-dM", "-E", "-x", "c++", os.devnull]
    done = subprocess.run(probe, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        reason = "\n".join(done.stderr.strip().splitlines()[:2])
        raise ValueError(
            f"NEUROEVO_MARCH={march}: `{compiler}` rejects -march={march} ({reason}); "
            f"use {MARCH_HELP}."
        )
    return frozenset(line.split()[1] for line in done.stdout.splitlines() if line.count(" ") >= 1)


# Instruction sets doctor reports, widest first, as (compiler macro, name).
ISA_FEATURES = (
    ("__AVX512F__", "AVX-512"),
    ("__AVX512BW__", "AVX512BW"),
    ("__AVX512VBMI__", "AVX512VBMI"),
    ("__AVX512BF16__", "AVX512BF16"),
    ("__AVX2__", "AVX2"),
    ("__FMA__", "FMA"),
    ("__SSE4_1__", "SSE4.1"),
    ("__ARM_NEON", "NEON"),
)


def target_isa() -> dict[str, Any]:
    """The instruction set the op libraries target: ``march``, ``isa`` and ``features``.

    ``isa`` is the widest vector extension (``AVX-512``, ``AVX2``, ``NEON`` or ``baseline``);
    ``features`` lists every extension of ``ISA_FEATURES`` the target has.
    """
    march = target_march()
    macros = _target_macros(_compiler(), march)
    features = [name for macro, name in ISA_FEATURES if macro in macros]
    isa = next((f for f in ("AVX-512", "AVX2", "NEON") if f in features), "baseline")
    return {"march": march, "isa": isa, "features": features}


def arch_flags(march: str | None = None, compiler: str | None = None) -> list[str]:
    """The target flags of a build for ``march`` (default: ``target_march()``) with
    ``compiler`` (default: the op libraries'); also used for the kernels' standalone drivers."""
    march = march or target_march()
    compiler = compiler or _compiler()
    # TensorFlow's bundled Eigen has AVX512-FP16 packet code that GCC 12 cannot compile
    # (Sapphire Rapids and later); no kernel here computes in half precision. A compiler too
    # old to know the flag does not enable the extension either.
    no_fp16 = "-mno-avx512fp16"
    has_fp16 = "__AVX512FP16__" in _target_macros(compiler, march)
    return [f"-march={march}", *([no_fp16] if has_fp16 and _accepts(no_fp16, compiler) else [])]


def _accepts(flag: str, compiler: str | None = None) -> bool:
    """Whether the C++ compiler (default: the op libraries') accepts ``flag``."""
    probe = [compiler or _compiler(), flag, "-x", "c++", "-E", os.devnull]
    return subprocess.run(probe, capture_output=True).returncode == 0


def _arch_tag() -> str:
    """``-march`` of the build; for ``native``, plus a digest of this CPU's feature flags."""
    march = target_march()
    if march != "native":
        return f"march-{march}"
    return "native-" + hashlib.sha256(_cpu_flags().encode()).hexdigest()[:8]


def _tf_flags() -> tuple[str, list[str], list[str]]:
    import tensorflow as tf

    cflags = list(tf.sysconfig.get_compile_flags())
    include = next(flag[2:] for flag in cflags if flag.startswith("-I"))
    if not (Path(include) / "tensorflow" / "core" / "framework" / "op.h").exists():
        raise OpBuildError(
            f"TensorFlow's C++ headers are missing from {include}; reinstall tensorflow-cpu "
            "(`pip install --force-reinstall tensorflow-cpu`)."
        )
    return tf.__version__, cflags, list(tf.sysconfig.get_link_flags())


# ---------------------------------------------------------------------------------------- ALE


def _ale_version() -> str:
    return importlib.metadata.version("ale-py")


def ale_prefix() -> Path:
    """Install prefix of the static ALE core for the installed ale-py version."""
    return cache_root() / "ale" / _ale_version() / "prefix"


def ensure_ale() -> Path:
    """Builds ``libale.a`` from the ale-py source distribution once per ale-py version.

    The sdist is fetched with pip from the package registry (about 11 MB), configured without
    LTO (an LTO archive holds only gcc bytecode and runs ~12% slower) and built with CMake at
    ``-O3`` for the generic x86-64 baseline: ``-march=native`` or profile-guided builds of ALE
    ran no faster side by side (docs/PERFORMANCE.md, runs in docs/LAB-NOTEBOOK.md), so the
    archive stays portable.
    """
    prefix = ale_prefix()
    if (prefix / "lib" / "libale.a").exists():
        return prefix
    with file_lock(prefix.parent / ".lock"):
        if (prefix / "lib" / "libale.a").exists():
            return prefix
        for tool in ("cmake",):
            if shutil.which(tool) is None:
                raise OpBuildError(
                    "building ALE's C++ core needs cmake: `apt-get install cmake ninja-build "
                    "zlib1g-dev` (or `pip install cmake ninja`)."
                )
        version = _ale_version()
        with tempfile.TemporaryDirectory(prefix="neuroevo-ale-") as tmp:
            work = Path(tmp)
            print(
                f"neuroevo: building ALE {version} C++ core (about a minute, once)", file=sys.stderr
            )
            _run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--no-binary",
                    "ale-py",
                    f"ale-py=={version}",
                    "-d",
                    str(work),
                ],
                f"downloading the ale-py {version} source distribution",
            )
            archive = next(work.glob("ale_py-*.tar.gz"))
            shutil.unpack_archive(archive, work)
            src = next(p for p in work.iterdir() if p.is_dir() and p.name.startswith("ale_py-"))
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            staging = prefix.parent / "prefix.partial"
            shutil.rmtree(staging, ignore_errors=True)
            _run(
                [
                    "cmake",
                    "-S",
                    str(src),
                    "-B",
                    str(work / "build"),
                    *generator,
                    "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O3 -DNDEBUG",
                    "-DCMAKE_POSITION_INDEPENDENT_CODE=ON",
                    "-DBUILD_CPP_LIB=ON",
                    "-DBUILD_PYTHON_LIB=OFF",
                    "-DSDL_SUPPORT=OFF",
                    "-DBUILD_VECTOR_LIB=OFF",
                    "-DBUILD_VECTOR_XLA_LIB=OFF",
                    f"-DCMAKE_INSTALL_PREFIX={staging}",
                ],
                "configuring ALE (cmake)",
            )
            jobs = str(os.cpu_count() or 2)
            _run(["cmake", "--build", str(work / "build"), "-j", jobs], "building ALE")
            _run(["cmake", "--install", str(work / "build")], "installing ALE")
            staging.rename(prefix)
    return prefix


def _mujoco_paths() -> tuple[Path, Path]:
    import mujoco

    root = Path(mujoco.__file__).parent
    libs = sorted(root.glob("libmujoco.so.*"))
    if not libs or not (root / "include" / "mujoco" / "mujoco.h").exists():
        raise OpBuildError(
            f"the installed mujoco package at {root} lacks libmujoco or its C headers; "
            "reinstall it (`pip install --force-reinstall mujoco`)."
        )
    return root / "include", libs[-1]


# ------------------------------------------------------------------------------------ libraries


def _engine_flags(engine: str | None) -> tuple[list[str], list[str], str]:
    """Extra compile flags, link flags and a version tag for the library's engine."""
    if engine is None:
        return [], [], ""
    if engine == "ale":
        prefix = ensure_ale()
        return (
            [f"-I{prefix / 'include'}"],
            [str(prefix / "lib" / "libale.a"), "-lz", "-Wl,--exclude-libs,ALL"],
            f"ale-py {_ale_version()}",
        )
    if engine == "mujoco":
        include, library = _mujoco_paths()
        return (
            [f"-I{include}"],
            [str(library), f"-Wl,-rpath,{library.parent}"],
            f"mujoco {library.name}",
        )
    raise ValueError(f"unknown engine {engine!r}; expected one of {ENGINES}")


def sources_installed(name: str) -> bool:
    """Whether library ``name``'s sources are present: always in a clone; from a wheel, only
    for the production libraries."""
    src = source_dir()
    return all((src / s).is_file() for s in _spec(name).sources)


def _check_sources(spec: LibrarySpec, src: Path) -> None:
    missing = [s for s in spec.sources if not (src / s).is_file()]
    if not missing:
        return
    if spec.purpose != "production":
        raise OpBuildError(
            f"the {spec.name} op library is for {spec.purpose}s only and its sources "
            f"({', '.join(missing)}) are not installed: they ship in a clone of neuroevo, not "
            "in the wheel; run the benchmarks and tests from a clone"
        )
    raise OpBuildError(
        f"neuroevo's installation lacks the sources of the {spec.name} op library "
        f"({', '.join(missing)} in {src}); reinstall with `pip install .`"
    )


def _source_digest(spec: LibrarySpec, src: Path) -> str:
    """Hashes what the library compiles: its own .cc files and every header (headers include
    across folders); another library's .cc beside them, a benchmark's say, does not count."""
    digest = hashlib.sha256()
    files = sorted(src.glob("*/*.h")) + sorted(src / s for s in spec.sources)
    for path in files:
        digest.update(path.relative_to(src).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


CACHE_LAYOUT = "manifest-1"
"""Part of every key: builds from before each library had a manifest never match."""


def library_key(name: str) -> tuple[str, Path]:
    """The cache key of a library and where its ``.so`` is (or would be) cached.

    Does not build anything, so ``neuroevo.doctor`` can say whether the cached file is current.
    Engine versions enter the key through the installed package versions.

    Raises:
        OpBuildError: the library's sources are not installed (a bench or test library of a
            wheel install).
    """
    spec = _spec(name)
    src = source_dir()
    _check_sources(spec, src)
    tf_version, cflags, ldflags = _tf_flags()
    engine_tag = ""
    if spec.engine == "ale":
        engine_tag = f"ale-py {_ale_version()}"
    elif spec.engine == "mujoco":
        engine_tag = f"mujoco {_mujoco_paths()[1].name}"
    digest = hashlib.sha256()
    parts = (
        CACHE_LAYOUT,
        tf_version,
        *cflags,
        *ldflags,
        _compiler(),
        _arch_tag(),
        engine_tag,
        *spec.cflags,
    )
    for part in (*parts, _source_digest(spec, src)):
        digest.update(part.encode())
        digest.update(b"\0")
    key = digest.hexdigest()[:16]
    return key, cache_root() / "ops" / f"libneuroevo_{name}-{key}.so"


def _spec(name: str) -> LibrarySpec:
    if not LIBRARIES:
        source_dir()  # raises with the fix when the sources are missing
    if name not in LIBRARIES:
        raise ValueError(f"unknown op library {name!r}; expected one of {sorted(LIBRARIES)}")
    return LIBRARIES[name]


def manifest_path(library: Path) -> Path:
    """The JSON file beside a built library: its target ISA, size and sha256."""
    return library.with_suffix(".json")


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(library: Path) -> dict[str, Any] | None:
    """The manifest of a built library, or None if it is missing or unreadable."""
    try:
        manifest = json.loads(manifest_path(library).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def library_state(library: Path) -> str:
    """``missing``, ``corrupt`` (size or sha256 differ from its manifest, or no manifest) or
    ``current``.

    A truncated ``.so`` passes for a library until ``dlopen`` maps it and the process dies of
    a bus error, so every load checks the file against the manifest written with it first.
    """
    if not library.exists():
        return "missing"
    manifest = read_manifest(library)
    if (
        manifest is None
        or manifest.get("size") != library.stat().st_size
        or manifest.get("sha256") != _file_sha256(library)
    ):
        return "corrupt"
    return "current"


def build_library(name: str, force: bool = False) -> Path:
    """Returns the path of the current build of library ``name``, compiling it if needed.

    A cached library that fails its checksum (truncated by a full disk, a killed copy, ...) is
    rebuilt with a warning on stderr.
    """
    spec = _spec(name)
    _, target = library_key(name)
    if not force and library_state(target) == "current":
        return target
    with file_lock(target.parent / f".{name}.lock"):
        state = library_state(target)
        if state == "current" and not force:
            return target
        if state == "corrupt":
            print(
                f"neuroevo: WARNING: the cached {name} op library {target} does not match its "
                "recorded size and checksum (truncated or corrupt); rebuilding it",
                file=sys.stderr,
            )
        src = source_dir()
        _, cflags, ldflags = _tf_flags()
        engine_cflags, engine_ldflags, _ = _engine_flags(spec.engine)
        isa = target_isa()
        print(
            f"neuroevo: compiling the {name} op library for -march={isa['march']} "
            "(once per TF/source version)",
            file=sys.stderr,
        )
        partial = target.with_suffix(f".partial-{os.getpid()}")
        cmd = [
            _compiler(),
            *cflags,
            "-O3",
            *arch_flags(),
            *spec.cflags,
            "-fPIC",
            "-shared",
            "-Wall",
            "-Wno-deprecated-declarations",
            "-Wno-interference-size",
            "-Wno-sign-compare",
            f"-I{src}",
            *engine_cflags,
            *(str(src / s) for s in spec.sources),
            "-o",
            str(partial),
            *ldflags,
            *engine_ldflags,
        ]
        _run(cmd, f"compiling the {name} op library")
        manifest = {**isa, "size": partial.stat().st_size, "sha256": _file_sha256(partial)}
        partial_manifest = target.parent / f"{target.stem}.json.partial-{os.getpid()}"
        partial_manifest.write_text(json.dumps(manifest, indent=2) + "\n")
        partial.rename(target)
        partial_manifest.rename(manifest_path(target))
        _drop_old_builds(target, name)
    return target


KEEP_BUILDS = 4
"""Builds of one library kept in the cache: several venvs, TF versions or checkouts on one
machine each keep theirs instead of evicting each other's on every run."""


def _drop_old_builds(target: Path, name: str) -> None:
    """Deletes all but the ``KEEP_BUILDS`` newest builds of ``name`` (``target`` included)."""
    builds = sorted(
        target.parent.glob(f"libneuroevo_{name}-*.so"),
        key=lambda path: path.stat().st_mtime,
        reverse=True,
    )
    for stale in builds[KEEP_BUILDS:]:
        if stale != target:
            stale.unlink(missing_ok=True)
            manifest_path(stale).unlink(missing_ok=True)
