"""Compiles the C++ op libraries against the TensorFlow installed at run time.

A custom op must be built with the same TensorFlow headers and C++ ABI as the TensorFlow that
loads it, so neuroevo ships C++ sources (``custom_ops/``) and compiles them on first use. Each
library is cached under a key made of everything that changes the binary (TensorFlow version
and flags, compiler, source bytes, linked engine version), so an upgrade or an edit rebuilds it
and nothing else does. A file lock keeps concurrent processes from building the same thing.

ALE (Atari) has no C++ headers in its wheel: we build its core as a static library from the
ale-py source distribution of the installed version (see docs/ARCHITECTURE.md for why).
MuJoCo's wheel ships ``libmujoco`` and its headers, so the MuJoCo op links it directly.

The op libraries are compiled for the CPU they are built on (``-march=native``) and their
cache keys name that CPU's instruction set extensions, so a cache shared with another kind of
machine is rebuilt rather than loaded with instructions this CPU lacks;
``NEUROEVO_PORTABLE_BUILD=1`` builds them for the generic x86-64 baseline instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ENGINES = ("ale", "mujoco")


class OpBuildError(RuntimeError):
    """A C++ op library could not be built; the message says what to install or run."""


@dataclasses.dataclass(frozen=True)
class LibrarySpec:
    """One shared library of ops: its sources (relative to ``custom_ops/``) and what it links."""

    name: str
    sources: tuple[str, ...]
    engine: str | None = None


LIBRARIES: dict[str, LibrarySpec] = {
    "core": LibrarySpec("core", ("core/indexed_matmul.cc",)),
    # The Atari op links ALE (GPL-2.0) and therefore lives in a library of its own.
    "atari": LibrarySpec("atari", ("atari/atari_ops.cc",), engine="ale"),
    "mujoco": LibrarySpec("mujoco", ("mujoco/mujoco_ops.cc",), engine="mujoco"),
}


def cache_root() -> Path:
    """Where built libraries live: ``$NEUROEVO_CACHE`` or ``~/.cache/neuroevo``."""
    return Path(os.environ.get("NEUROEVO_CACHE", Path.home() / ".cache" / "neuroevo"))


def source_dir() -> Path:
    """The C++ sources: ``custom_ops/`` of a checkout, else the copy installed with the wheel."""
    package_dir = Path(__file__).resolve().parents[1]
    for candidate in (package_dir.parent / "custom_ops", package_dir / "_csrc"):
        if (candidate / "common").is_dir():
            return candidate
    raise OpBuildError(
        f"neuroevo's C++ sources are missing (looked in {package_dir.parent / 'custom_ops'} "
        f"and {package_dir / '_csrc'}); reinstall with `pip install .`"
    )


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


def _native() -> bool:
    """Whether builds target this machine's CPU; ``NEUROEVO_PORTABLE_BUILD`` turns it off."""
    return not os.environ.get("NEUROEVO_PORTABLE_BUILD")


def _cpu_flags() -> str:
    """The ``flags`` line of /proc/cpuinfo (empty where there is none)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    return ""


def _arch_flags() -> list[str]:
    if not _native():
        return []
    # TensorFlow's bundled Eigen has AVX512-FP16 packet code that GCC 12 cannot compile
    # (Sapphire Rapids and later); no kernel here computes in half precision. A compiler too
    # old to know the flag does not enable the extension either.
    no_fp16 = "-mno-avx512fp16"
    fp16 = [no_fp16] if "avx512_fp16" in _cpu_flags().split() and _accepts(no_fp16) else []
    return ["-march=native", *fp16]


def _accepts(flag: str) -> bool:
    """Whether the C++ compiler accepts ``flag``."""
    probe = [_compiler(), flag, "-x", "c++", "-E", os.devnull]
    return subprocess.run(probe, capture_output=True).returncode == 0


def _arch_tag() -> str:
    """``portable``, or ``native-<digest of this CPU's feature flags>`` for a native build."""
    if not _native():
        return "portable"
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
    ran no faster here (docs/PERFORMANCE.md), so the archive stays portable.
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


def _source_digest(spec: LibrarySpec, src: Path) -> str:
    digest = hashlib.sha256()
    files = sorted((src / "common").glob("*.h")) + sorted(
        p for s in spec.sources for p in (src / s).parent.glob("*") if p.suffix in (".h", ".cc")
    )
    for path in files:
        digest.update(path.relative_to(src).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def library_key(name: str) -> tuple[str, Path]:
    """The cache key of a library and where its ``.so`` is (or would be) cached.

    Does not build anything, so ``neuroevo.doctor`` can say whether the cached file is current.
    Engine versions enter the key through the installed package versions.
    """
    spec = _spec(name)
    src = source_dir()
    tf_version, cflags, ldflags = _tf_flags()
    engine_tag = ""
    if spec.engine == "ale":
        engine_tag = f"ale-py {_ale_version()}"
    elif spec.engine == "mujoco":
        engine_tag = f"mujoco {_mujoco_paths()[1].name}"
    digest = hashlib.sha256()
    parts = (tf_version, *cflags, *ldflags, _compiler(), _arch_tag(), engine_tag)
    for part in (*parts, _source_digest(spec, src)):
        digest.update(part.encode())
        digest.update(b"\0")
    key = digest.hexdigest()[:16]
    return key, cache_root() / "ops" / f"libneuroevo_{name}-{key}.so"


def _spec(name: str) -> LibrarySpec:
    if name not in LIBRARIES:
        raise ValueError(f"unknown op library {name!r}; expected one of {sorted(LIBRARIES)}")
    return LIBRARIES[name]


def build_library(name: str, force: bool = False) -> Path:
    """Returns the path of the current build of library ``name``, compiling it if needed."""
    spec = _spec(name)
    _, target = library_key(name)
    if target.exists() and not force:
        return target
    with file_lock(target.parent / f".{name}.lock"):
        if target.exists() and not force:
            return target
        src = source_dir()
        _, cflags, ldflags = _tf_flags()
        engine_cflags, engine_ldflags, _ = _engine_flags(spec.engine)
        print(
            f"neuroevo: compiling the {name} op library (once per TF/source version)",
            file=sys.stderr,
        )
        partial = target.with_suffix(f".partial-{os.getpid()}")
        cmd = [
            _compiler(),
            *cflags,
            "-O3",
            *_arch_flags(),
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
        partial.rename(target)
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
