"""Overrides of a config's keys, merged into its nested mapping before validation: the
``key.path=value`` strings of ``--set`` and the mapping ``ne.train`` takes."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from neuroevo.config.yaml import parse_yaml
from neuroevo.core.params import ParamError

__all__ = ["Overrides", "merge_overrides"]

Overrides = Sequence[str] | Mapping[str, Any]
"""``key.path=value`` strings (``--set``; values parsed as YAML), or dotted keys mapped to
Python values (``ne.train``; numpy scalars and arrays, tuples and paths are taken as the
number, list or string they hold)."""

_KEY_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _set_value(data: dict[str, Any], parts: list[str], value: Any, what: str) -> None:
    """Sets the key of path ``parts`` in the nested mapping ``data`` to ``value`` in place
    (``what`` names the override in messages)."""
    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            section = ".".join(parts[: depth + 1])
            raise ParamError(f"{what}: '{section}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def _key_parts(key: object) -> list[str] | None:
    """The parts of a dotted key such as ``budget.generations``, or None if it is not one."""
    if not isinstance(key, str):
        return None
    parts = key.strip().split(".")
    return parts if all(_KEY_PART.fullmatch(part) for part in parts) else None


def _plain(value: Any) -> Any:
    """A Python override value as YAML would give it (see :data:`Overrides`)."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def merge_overrides(data: Mapping[str, Any], overrides: Overrides) -> dict[str, Any]:
    """A deep copy of the nested mapping ``data`` with ``overrides`` applied in order.

    Raises:
        ParamError: a malformed key or ``--set`` string, a value where a section is needed,
            or a ``--set`` value that is not valid YAML.
    """
    merged = _deep_copy(data)
    if isinstance(overrides, Mapping):
        for key, value in overrides.items():
            parts = _key_parts(key)
            if parts is None:
                raise ParamError(f"override key {key!r} must be a dotted key such as 'seed'")
            _set_value(merged, parts, _plain(value), f"override '{key}'")
        return merged
    for item in overrides:
        path, sep, text = item.partition("=")
        what = f"--set '{item}'"
        parts = _key_parts(path)
        if not sep or parts is None:
            raise ParamError(f"{what} must look like key.path=value")
        _set_value(merged, parts, parse_yaml(text, what), what)
    return merged


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in data.items()}
