"""Component classes by config name, imported only when one is built.

A registry maps each name to a class, or to a ``Lazy`` entry: the class's import path plus
what the configuration reads of it before anything is built (its options class, what it gives
or needs). Choice lists and config sections come from the entries, so loading and validating a
config imports no implementation, hence no TensorFlow. The class is imported on its first
lookup, and its own attributes are checked against what its entry declared then, so the two
cannot drift apart. A class registered directly (``MODELS["tiny"] = TinyMLP``) is read as is.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any


class Lazy:
    """A registry entry that imports its class on first use.

    Args:
        path: ``"package.module:Class"``.
        **declared: the class attributes the config reads, e.g. ``options_class=AtariOptions``.
    """

    def __init__(self, path: str, **declared: Any):
        module, sep, name = path.partition(":")
        if not sep or not module or not name:
            raise ValueError(f"a lazy registry path is 'package.module:Class', got {path!r}")
        self.path = path
        self.declared = declared

    def load(self) -> type:
        """Imports the class and checks it has the declared attributes.

        Raises:
            TypeError: an attribute of the class differs from its declaration here.
        """
        module, _, name = self.path.partition(":")
        cls = getattr(importlib.import_module(module), name)
        for attribute, value in self.declared.items():
            actual = getattr(cls, attribute, None)
            if actual != value:
                raise TypeError(
                    f"{self.path}.{attribute} is {actual!r} but its registry entry declares "
                    f"{value!r}; make them agree"
                )
        return cls

    def __repr__(self) -> str:
        return f"Lazy({self.path!r})"


class Registry(MutableMapping[str, type]):
    """Classes by config name; values are imported on first lookup (see the module docstring).

    Args:
        entries: name -> class or ``Lazy`` entry, in the order choice lists show them.
    """

    def __init__(self, entries: Mapping[str, type | Lazy]):
        self._entries: dict[str, type | Lazy] = dict(entries)

    def __getitem__(self, name: str) -> type:
        entry = self._entries[name]
        if isinstance(entry, Lazy):
            entry = self._entries[name] = entry.load()
        return entry

    def __setitem__(self, name: str, cls: type | Lazy) -> None:
        self._entries[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def declared(self, name: str, attribute: str) -> Any:
        """Class attribute ``attribute`` of entry ``name``, without importing a lazy entry.

        Raises:
            KeyError: no such entry, or a lazy entry that does not declare ``attribute``.
        """
        entry = self._entries[name]
        if isinstance(entry, Lazy):
            if attribute not in entry.declared:
                raise KeyError(f"registry entry {entry.path} does not declare {attribute!r}")
            return entry.declared[attribute]
        return getattr(entry, attribute)

    def __repr__(self) -> str:
        return f"Registry({self._entries!r})"
