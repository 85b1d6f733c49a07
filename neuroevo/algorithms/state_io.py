"""An optimizer's State dataclass to a flat checkpoint dict and back, from its type hints.

Every strategy keeps what changes during a run in one frozen ``State`` dataclass; this module
turns any such dataclass into the flat ``{key: value}`` dict a checkpoint stores (YAML scalars
plus numpy arrays) and rebuilds it, so no strategy writes (de)serialisation code: a new
strategy whose State uses the field types below is checkpointed as is, much as evosax's
pytree states are.

Field types and how they are stored (``key`` is the field name, nested fields are joined by
"."):

- ``int``, ``float``, ``bool``, ``str`` (optionally ``| None``): the value under ``key``.
- an ``enum.Enum`` subclass (``Phase``): its ``value`` under ``key``.
- ``np.ndarray``: the array under ``key``; on load its dtype and number of dimensions must be
  those of the optimizer's current State, and so must its shape unless that array is empty
  (one that fills during a run, such as the GA's fitness before the population is told).
- a genome (``GAGenome``, ``ESGenome``), ``tuple[<genome>, ...]`` or ``<genome> | None``: the
  genomes packed as arrays under ``key.*`` (:func:`~neuroevo.genomes.genome.pack_genomes`; a single
  genome is a pack of one, None a pack of none).
- ``tuple[int, ...]`` (or of ``float``, ``str``): a YAML list under ``key``.
- ``Mapping[str, float]``: one entry per item, ``key.<name>``.
- a dataclass (``GenerationSummary``), optionally ``| None``: its fields under ``key.*``,
  recursively; no entry at all for None.
- an object with ``state_dict()`` / ``load_state_dict()`` (``NoveltyArchive``): its state dict
  under ``key.*``; on load a copy of the current State's object loads it.

The key scheme is the one the per-strategy code of earlier versions wrote, so their
checkpoints load unchanged. Anything wrong in the data (a missing or unknown key, a wrong type,
dtype or shape, an unknown enum value) raises a ``ValueError`` naming the field.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any

import numpy as np

from neuroevo.genomes.genome import ESGenome, GAGenome, pack_genomes, unpack_genomes

__all__ = ["decode_state", "encode_state"]

_GENOMES = (GAGenome, ESGenome)
_SCALARS = (bool, int, float, str)


class _Field(typing.NamedTuple):
    """A State field's storage kind, read from its type hint."""

    kind: str  # scalar, enum, array, genome, genomes, list, mapping, dataclass, stateful
    type: Any  # the scalar / enum / genome / dataclass type, or the list's element type
    optional: bool


def _describe(hint: Any) -> _Field:
    """The storage kind of a type hint (see the module docstring for the supported ones)."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        if all(arg in _GENOMES for arg in args):
            return _Field("genome", tuple(args), optional)
        if len(args) != 1:
            raise TypeError(f"cannot checkpoint a field of type {hint}")
        hint = args[0]
    origin = typing.get_origin(hint)
    if origin is tuple:
        element, *rest = typing.get_args(hint)
        if rest != [Ellipsis]:
            raise TypeError(f"cannot checkpoint {hint}: use tuple[X, ...]")
        element_field = _describe(element)
        if element_field.optional:
            raise TypeError(f"cannot checkpoint {hint}: no None in a tuple (keep a mask array)")
        if element_field.kind == "genome":
            return _Field("genomes", element_field.type, optional)
        if element_field.kind == "scalar":
            return _Field("list", element, optional)
        raise TypeError(f"cannot checkpoint {hint}: tuples hold genomes or scalars")
    if origin in (Mapping, dict, typing.Mapping):
        return _Field("mapping", float, optional)
    if hint in _GENOMES:
        return _Field("genome", (hint,), optional)
    if hint is np.ndarray:
        return _Field("array", hint, optional)
    if hint in _SCALARS:
        return _Field("scalar", hint, optional)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _Field("enum", hint, optional)
    if dataclasses.is_dataclass(hint):
        return _Field("dataclass", hint, optional)
    if isinstance(hint, type) and callable(getattr(hint, "load_state_dict", None)):
        return _Field("stateful", hint, optional)
    raise TypeError(
        f"cannot checkpoint a field of type {hint}: State fields are scalars, enums, numpy "
        "arrays, genomes, tuples of those, Mapping[str, float], dataclasses, or objects with "
        "state_dict()/load_state_dict()"
    )


def _fields(cls: type) -> list[tuple[str, _Field]]:
    hints = typing.get_type_hints(cls)
    return [(f.name, _describe(hints[f.name])) for f in dataclasses.fields(cls)]


def _sub(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    start = f"{key}."
    return {k.removeprefix(start): v for k, v in data.items() if k.startswith(start)}


def encode_state(state: Any) -> dict[str, Any]:
    """Flattens a State dataclass into ``{key: scalar | None | list | np.ndarray}``.

    Raises:
        TypeError: If a field's type hint is not one of the supported ones.
    """
    data: dict[str, Any] = {}
    for name, spec in _fields(type(state)):
        value = getattr(state, name)
        if spec.kind in ("dataclass", "stateful", "mapping"):
            if value is None:
                continue
            inner = (
                encode_state(value)
                if spec.kind == "dataclass"
                else value.state_dict()
                if spec.kind == "stateful"
                else {k: float(v) for k, v in value.items()}
            )
            data |= {f"{name}.{k}": v for k, v in inner.items()}
        elif spec.kind in ("genome", "genomes"):
            genomes = value if spec.kind == "genomes" else () if value is None else (value,)
            data |= {f"{name}.{k}": v for k, v in pack_genomes(genomes).items()}
        elif spec.kind == "enum":
            data[name] = value.value
        elif spec.kind == "list":
            data[name] = list(value)
        else:
            data[name] = value
    return data


def decode_state(cls: type, data: Mapping[str, Any], template: Any = None, where: str = "") -> Any:
    """Inverts :func:`encode_state`: a State of class ``cls`` from ``data``.

    Args:
        cls: The State dataclass.
        data: The flat dict :func:`encode_state` wrote (extra keys are refused).
        template: A State of class ``cls`` (the optimizer's current one), whose arrays give
            the expected dtypes and shapes and whose stateful objects are copied to load
            into; None checks types only.
        where: Key prefix for error messages.

    Raises:
        ValueError: On a missing or unexpected key, or a value of the wrong type, dtype,
            shape or enum value; the message names the key.
    """
    values: dict[str, Any] = {}
    used: set[str] = set()
    for name, spec in _fields(cls):
        key = f"{where}{name}"
        current = None if template is None else getattr(template, name)
        own = _sub(data, name)
        used |= {f"{name}.{k}" for k in own}
        if spec.kind in ("dataclass", "stateful", "mapping") or spec.kind.startswith("genome"):
            values[name] = _decode_nested(spec, own, current, key)
            continue
        if name not in data:
            raise ValueError(f"optimizer checkpoint lacks '{key}'")
        used.add(name)
        values[name] = _decode_leaf(spec, data[name], current, key)
    unknown = sorted(set(data) - used)
    if unknown:
        raise ValueError(
            f"optimizer checkpoint has keys {', '.join(where + k for k in unknown)} that "
            f"{cls.__name__} does not; it was written by another optimizer"
        )
    return cls(**values)


def _invalid(key: str, problem: str) -> ValueError:
    return ValueError(f"optimizer checkpoint '{key}' {problem}")


def _decode_nested(spec: _Field, own: dict[str, Any], template: Any, key: str) -> Any:
    if spec.kind == "mapping":
        number = _Field("scalar", float, False)
        return {k: _decode_leaf(number, v, None, f"{key}.{k}") for k, v in own.items()}
    if spec.kind in ("genome", "genomes"):
        try:
            genomes = unpack_genomes(own)
        except (KeyError, ValueError, TypeError, AttributeError) as err:
            raise _invalid(key, f"holds no valid genomes ({err})") from None
        if not all(isinstance(g, spec.type) for g in genomes):
            raise _invalid(key, "holds genomes of another kind")
        for name, array in pack_genomes(genomes).items():
            if np.asarray(own[name]).dtype.kind != array.dtype.kind:
                raise _invalid(
                    f"{key}.{name}", f"is {np.asarray(own[name]).dtype}, not {array.dtype}"
                )
        if spec.kind == "genomes":
            return genomes
        if len(genomes) > 1 or (not genomes and not spec.optional):
            raise _invalid(key, f"must hold one genome, got {len(genomes)}")
        return genomes[0] if genomes else None
    if not own:
        if spec.optional:
            return None
        raise ValueError(f"optimizer checkpoint lacks '{key}'")
    if spec.kind == "dataclass":
        return decode_state(spec.type, own, template, f"{key}.")
    restored = spec.type() if template is None else copy.deepcopy(template)
    try:
        restored.load_state_dict(own)
    except (KeyError, ValueError, TypeError) as err:
        raise ValueError(f"optimizer checkpoint '{key}' is invalid: {err}") from None
    return restored


def _decode_leaf(spec: _Field, value: Any, template: Any, key: str) -> Any:
    if value is None:
        if spec.optional:
            return None
        raise ValueError(f"optimizer checkpoint '{key}' is null")
    if spec.kind == "array":
        if not isinstance(value, np.ndarray):
            raise _invalid(key, f"must be an array, got {type(value).__name__}")
        if isinstance(template, np.ndarray):
            want = template.shape
            same_shape = value.shape == want or (template.size == 0 and value.ndim == template.ndim)
            if value.dtype != template.dtype or not same_shape:
                raise ValueError(
                    f"optimizer checkpoint '{key}' is {value.dtype} {value.shape}, this "
                    f"optimizer's is {template.dtype} {want}; resume with the run's own config"
                )
        return value
    if spec.kind == "enum":
        try:
            return spec.type(value)
        except ValueError:
            choices = ", ".join(repr(m.value) for m in spec.type)
            raise _invalid(key, f"is {value!r}, not one of {choices}") from None
    if spec.kind == "list":
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"optimizer checkpoint '{key}' must be a list, got {value!r}")
        item = _Field("scalar", spec.type, False)
        return tuple(_decode_leaf(item, v, None, f"{key}[{i}]") for i, v in enumerate(value))
    if isinstance(value, np.generic):
        value = value.item()
    wanted = spec.type
    ok = isinstance(value, wanted) and not (wanted is not bool and isinstance(value, bool))
    if wanted is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        raise ValueError(f"optimizer checkpoint '{key}' must be {wanted.__name__}, got {value!r}")
    return value
