"""The algorithm, env and model sections of the config as tagged unions: one optional field
per registered component whose params class has keys, of which only the chosen one is
kept (see ``docs/CONFIG.md``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from neuroevo.core.params import Params
from neuroevo.core.registry import Registry

__all__ = ["registered_sections", "section_class_of", "select", "unselected"]


def registered_sections(registry: Registry) -> list[tuple[str, Any, Any]]:
    """One optional config field per registry entry whose params class has keys, read
    without importing a component registered with its params' path; :func:`select` keeps the
    chosen one."""
    sections = []
    for name in registry:
        options = section_class_of(registry, name)
        if options is not None:
            sections.append((name, options | None, dataclasses.field(default=None)))
    return sections


def section_class_of(registry: Registry, name: str) -> type[Params] | None:
    """The params class of a registry entry when it has keys (else it has no section)."""
    options = registry.params_class(name)
    return options if options is not None and dataclasses.fields(options) else None


def select(section: Params, registry: Registry, chosen: str) -> None:
    """Makes ``section`` a tagged union: the options of ``chosen`` (its defaults when the
    config gives none) stay, every other registered section is dropped. Those were validated
    against their class when given, so a typo still fails, but they are neither used, saved
    nor compared on resume."""
    for name in registry:
        options = section_class_of(registry, name)
        if options is None:
            continue
        if name != chosen:
            object.__setattr__(section, name, None)
        elif getattr(section, name) is None:
            object.__setattr__(section, name, options())


def unselected(registry: Registry, chosen: str) -> set[str]:
    """The registered sections a config with ``chosen`` drops."""
    return {
        name for name in registry if name != chosen and section_class_of(registry, name) is not None
    }
