"""Declared parameters: the one place a component states its options, defaults and valid values.

Every configurable component (an optimizer, an env kind, a model) declares its options once, as
a frozen dataclass deriving from :class:`Params`. The same class is what the component's
constructor reads and what a section of the training config is (``algorithm.ga`` *is*
:class:`~neuroevo.algorithms.ga.GAParams`), so defaults and validation cannot drift apart.

Construction checks and normalises every field from its type hint (lists become tuples,
integral floats such as YAML's ``1e9`` become ints, enums accept their string values, nested
sections accept mappings), then runs the class's ``_validate`` for ranges and relations.
Failures raise :class:`ParamError`, a ``ValueError`` whose ``key`` names the field; loaders
prefix the key with the section path, so a user reads the key they wrote, e.g.
``algorithm.ga.truncation: 2000 must be <= population_size (1000)``.

A class lists former names of its fields in ``renamed``; :func:`from_mapping` answers an old
name with the new one, so old config files fail with a fix instead of a guess.

This module imports neither TensorFlow nor numpy: configs load before anything heavy.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import numbers
import typing
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from types import UnionType
from typing import Any, ClassVar, TypeVar

__all__ = [
    "ParamError",
    "Params",
    "UnknownKeyError",
    "check",
    "check_choice",
    "from_mapping",
    "show",
    "take",
    "to_dict",
]

P = TypeVar("P", bound="Params")


class ParamError(ValueError):
    """An invalid parameter; the message names its key, the value and what is allowed.

    Attributes:
        problem: What is wrong, without the key.
        key: Dotted path of the offending key, or None when the problem is not about one key.
    """

    def __init__(self, problem: str, key: str | None = None) -> None:
        self.problem = problem
        self.key = key
        super().__init__(f"{key}: {problem}" if key else problem)

    def within(self, section: str) -> ParamError:
        """Returns this error with its key prefixed by ``section`` (where the section sits)."""
        return type(self)(self.problem, f"{section}.{self.key}" if self.key else section)


class UnknownKeyError(ParamError):
    """A key the schema does not have (a typo, or a key of another neuroevo version)."""


def show(value: Any) -> str:
    """Formats a value for an error message so its YAML spelling and type are visible."""
    if value is None:
        return "null"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Real):
        return repr(float(value) if isinstance(value, float) else value)
    if isinstance(value, str):
        return f"'{value}'"
    return f"{value!r} ({type(value).__name__})"


def check(ok: bool, key: str, value: Any, rule: str) -> None:
    """Raises ``ParamError("<value> must be <rule>", key)`` unless ``ok``."""
    if not ok:
        raise ParamError(f"{show(value)} must be {rule}", key)


def check_choice(value: str, choices: Iterable[str], key: str) -> None:
    """Raises ParamError unless ``value`` is one of ``choices`` (with a "did you mean" hint).

    Choice lists come from the registries (algorithm, env kind and model names, shapings), so a
    new entry is valid everywhere at once.
    """
    allowed = list(choices)
    if value not in allowed:
        close = difflib.get_close_matches(str(value), allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        names = ", ".join(f"'{a}'" for a in allowed)
        raise ParamError(f"{show(value)} is not one of {names}{hint}", key)


def _to_bool(value: Any, key: str) -> bool:
    if type(value).__name__ == "bool_":  # numpy's bool, without importing numpy
        return bool(value)
    if not isinstance(value, bool):
        raise ParamError(f"expected true or false, got {show(value)}", key)
    return value


def _to_int(value: Any, key: str) -> int:
    # YAML writes 1e9 as a float; accept it when it is integral so budgets read naturally.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ParamError(f"expected an integer, got {show(value)}", key)
    return int(value)


def _to_float(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParamError(f"expected a number, got {show(value)}", key)
    if not math.isfinite(value):
        raise ParamError(f"{show(value)} must be a finite number", key)
    return float(value)


def _to_str(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ParamError(f"expected a string, got {show(value)}", key)
    return value


_SCALARS = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str}


def _convert(value: Any, hint: Any, key: str) -> Any:
    """Checks ``value`` against the field type ``hint`` and returns it in canonical form.

    Supported hints: bool, int, float, str, Enum subclasses, Params subclasses,
    ``tuple[X, ...]``, ``dict[str, Any]`` (free-form keyword arguments, passed on as they are)
    and ``X | None`` of those.
    """
    if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union:
        (inner,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return None if value is None else _convert(value, inner, key)
    if value is None:
        raise ParamError("must not be null", key)
    if isinstance(hint, type) and issubclass(hint, Params):
        if isinstance(value, hint):
            return value
        if isinstance(value, Mapping):
            return from_mapping(hint, value, key)
        raise ParamError(f"expected a section of keys, got {show(value)}", key)
    if typing.get_origin(hint) is dict:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise ParamError(f"expected a section of keys, got {show(value)}", key)
        return dict(value)
    if typing.get_origin(hint) is tuple:
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise ParamError(f"expected a list, got {show(value)}", key)
        item_type = typing.get_args(hint)[0]
        return tuple(_convert(item, item_type, f"{key}[{i}]") for i, item in enumerate(value))
    if isinstance(hint, type) and issubclass(hint, Enum):
        if isinstance(value, hint):
            return value
        check_choice(value, [member.value for member in hint], key)
        return hint(value)
    return _SCALARS[hint](value, key)


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    """The resolved type hint of every field (modules may use postponed annotations)."""
    return typing.get_type_hints(cls)


@dataclasses.dataclass(frozen=True)
class Params:
    """Base of every declared parameter set: type normalisation, then ``_validate``.

    Subclasses are frozen dataclasses whose fields have defaults; ``dataclasses.replace``
    re-validates.
    """

    renamed: ClassVar[Mapping[str, str]] = {}
    """Former field names -> current ones, for the error an old config gets."""

    def __post_init__(self) -> None:
        types = _field_types(type(self))
        for field in dataclasses.fields(self):
            value = _convert(getattr(self, field.name), types[field.name], field.name)
            object.__setattr__(self, field.name, value)
        self._validate()

    def _validate(self) -> None:
        """Checks ranges and relations between fields; types are already normalised."""


def _unknown_key_error(section: type, path: str, name: str) -> UnknownKeyError:
    prefix = path.rpartition(".")[0]
    if name in section.renamed:
        new = section.renamed[name]
        full = f"{prefix}.{new}" if prefix else new
        return UnknownKeyError(f"key '{path}' was renamed to '{full}'; update the config")
    valid = [field.name for field in dataclasses.fields(section)]
    close = difflib.get_close_matches(name, valid, n=3)
    if close:
        hint = "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    else:
        hint = "valid keys here: " + ", ".join(valid)
    return UnknownKeyError(f"unknown key '{path}' ({hint})")


def from_mapping(section: type[P], data: Any, key: str = "") -> P:
    """Builds ``section`` from a mapping of its fields, naming full keys in errors.

    Missing fields keep their defaults; a nested section left empty in YAML (null) means all
    defaults.

    Args:
        section: A Params subclass.
        data: Mapping of field names to values (parsed YAML).
        key: Dotted path of this section in the config, for messages ("" at the top).

    Raises:
        ParamError: On an unknown key (with a rename or "did you mean" hint), a wrong type or
            an invalid value.
    """
    if not isinstance(data, Mapping):
        raise ParamError(f"expected a section of keys, got {show(data)}", key or None)
    types = _field_types(section)
    names = [field.name for field in dataclasses.fields(section)]
    for name in data:
        if name not in names:
            raise _unknown_key_error(section, f"{key}.{name}" if key else str(name), str(name))
    kwargs = {}
    for name in names:
        hint = types[name]
        path = f"{key}.{name}" if key else name
        if isinstance(hint, type) and issubclass(hint, Params):
            value = data.get(name)
            kwargs[name] = from_mapping(hint, {} if value is None else value, path)
        elif (optional := _optional_section(hint)) is not None:
            if data.get(name) is not None:
                kwargs[name] = from_mapping(optional, data[name], path)
        elif name in data:
            kwargs[name] = data[name]
    try:
        return section(**kwargs)
    except ParamError as err:
        if not key:
            raise
        raise err.within(key) from None


def _optional_section(hint: Any) -> type[Params] | None:
    """The section class of an optional section field (``GAParams | None``), else None."""
    if not (isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union):
        return None
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], Params):
        return args[0]
    return None


def to_dict(section: Params) -> dict[str, Any]:
    """Plain nested dicts, lists and scalars: what :func:`from_mapping` and YAML accept."""
    result: dict[str, Any] = {}
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        if isinstance(value, Params):
            value = to_dict(value)
        elif isinstance(value, Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        result[field.name] = value
    return result


def take(section: type[P], options: dict[str, Any]) -> P:
    """Removes ``section``'s fields from ``options`` and returns them as a validated section.

    For constructors that take keyword options of several declared sets (a model's own options
    and the options every model shares).
    """
    names = [field.name for field in dataclasses.fields(section)]
    return section(**{name: options.pop(name) for name in names if name in options})
