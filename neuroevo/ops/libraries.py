"""Which op libraries there are: each ``custom_ops/<folder>/`` declares those built from its
sources in ``libraries.yaml``; ``LIBRARIES`` is read from these files once, at import.

How a library is compiled and cached is :mod:`neuroevo.ops.build`'s business.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

__all__ = [
    "DECLARATION",
    "ENGINES",
    "LIBRARIES",
    "PURPOSES",
    "LibrarySpec",
    "OpBuildError",
    "discover_libraries",
    "source_dir",
]

ENGINES = ("ale", "mujoco")


class OpBuildError(RuntimeError):
    """A C++ op library could not be built; the message says what to install or run."""


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


@dataclasses.dataclass(frozen=True)
class LibrarySpec:
    """One shared library of ops: its sources (relative to ``custom_ops/``) and what it links.

    ``purpose`` is ``"production"`` for the libraries neuroevo itself loads, or ``"bench"`` /
    ``"test"`` for those only ``benchmarks/`` or ``tests/`` load: they keep baselines and
    test-only ops out of the production libraries, and their sources (named ``*_bench_ops.cc``
    and ``*_testing.cc``) ship only in a clone, not in the wheel (setup.py). Op names are
    unique across all libraries (TensorFlow refuses to register one name twice in a process).
    ``cflags`` are extra compiler flags of this library (part of its cache key).
    """

    name: str
    sources: tuple[str, ...]
    engine: str | None = None
    purpose: str = "production"
    cflags: tuple[str, ...] = ()


PURPOSES = ("production", "bench", "test")
DECLARATION = "libraries.yaml"
"""Each ``custom_ops/<folder>/`` declares the libraries built from its sources in this file:
``name: {sources: [files of the folder], links: ale | mujoco, purpose: bench | test,
cflags: [extra compiler flags]}`` (``links``, ``purpose`` and ``cflags`` optional; purpose
defaults to production). A new C++ env kind is
its folder, with this file, plus its Python env module."""


def _read_declaration(path: Path) -> dict[str, LibrarySpec]:
    """The libraries one folder's declaration lists.

    Raises:
        OpBuildError: The file is not a mapping of library names to valid entries.
    """
    try:
        entries = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        raise OpBuildError(f"cannot read {path}: {err}") from None
    if not isinstance(entries, dict):
        raise OpBuildError(f"{path} must map library names to their sources and links")
    specs = {}
    for name, entry in entries.items():
        where = f"{path}: library {name!r}"
        if not isinstance(entry, dict) or not set(entry) <= {
            "sources",
            "links",
            "purpose",
            "cflags",
        }:
            raise OpBuildError(
                f"{where} takes only sources, links, purpose and cflags, got {entry!r}"
            )
        sources = entry.get("sources")
        if (
            not isinstance(sources, list)
            or not sources
            or not all(isinstance(source, str) and "/" not in source for source in sources)
        ):
            raise OpBuildError(f"{where}: sources must list file names of {path.parent.name}/")
        engine, purpose = entry.get("links"), entry.get("purpose", "production")
        if engine is not None and engine not in ENGINES:
            raise OpBuildError(f"{where}: links must be one of {ENGINES}, got {engine!r}")
        if purpose not in PURPOSES:
            raise OpBuildError(f"{where}: purpose must be one of {PURPOSES}, got {purpose!r}")
        cflags = entry.get("cflags", [])
        if not isinstance(cflags, list) or not all(
            isinstance(flag, str) and flag.startswith("-") for flag in cflags
        ):
            raise OpBuildError(f"{where}: cflags must list compiler flags such as -O3")
        folder = path.parent.name
        specs[name] = LibrarySpec(
            name, tuple(f"{folder}/{source}" for source in sources), engine, purpose, tuple(cflags)
        )
    return specs


def discover_libraries(src: Path) -> dict[str, LibrarySpec]:
    """Every library declared under ``src`` (``custom_ops/``), production ones first.

    Raises:
        OpBuildError: A declaration is invalid, or two folders declare the same name.
    """
    found: dict[str, LibrarySpec] = {}
    for path in sorted(src.glob(f"*/{DECLARATION}")):
        for name, spec in _read_declaration(path).items():
            if name in found:
                raise OpBuildError(f"op library {name!r} is declared twice (again in {path})")
            found[name] = spec
    order = sorted(found.values(), key=lambda spec: PURPOSES.index(spec.purpose))
    return {spec.name: spec for spec in order}


def _installed_libraries() -> dict[str, LibrarySpec]:
    try:
        return discover_libraries(source_dir())
    except OpBuildError:  # no sources: building says so, with the fix
        return {}


LIBRARIES: dict[str, LibrarySpec] = _installed_libraries()
"""The op libraries by name, from the ``custom_ops/*/libraries.yaml`` declarations."""
