"""Component classes by config name, imported only when one is built.

Three registries use this class: ``neuroevo.algorithms.ALGORITHMS``, ``neuroevo.envs.ENV_KINDS``
and ``neuroevo.models.MODELS``. An entry is a name and the component's import path
(``"package.module:Class"``) or the class itself. A component declares everything once, in its
``params_class`` (a :class:`~neuroevo.core.params.Params`, whatever the kind of component): the
config section with defaults and checks, and what the component gives or needs as class
attributes (``image_observations``, ``discrete_actions``, ``needs_behavior``). The registry
restates none of it.

Loading a config reads the params classes only. A component whose module is expensive to
import (the built-in envs and models import TensorFlow) is registered with ``params=``, the
import path of its params class in a light module: the config then reads that class without
importing the component, which is imported on its first build (``make_env``, ``make_model``,
``make_algorithm``); its ``params_class`` must be that class, checked then.

User code adds a component without editing neuroevo, before ``neuroevo.config.schema`` is first
imported (the config composes its sections from the registries then)::

    from neuroevo.models import MODELS
    MODELS.register("tiny", "my_pkg.tiny:TinyMLP")

or, so that ``python -m neuroevo.train`` finds it with no code run first, as a Python entry
point of its package in the registry's group (``neuroevo.algorithms``, ``neuroevo.envs``,
``neuroevo.models``)::

    [project.entry-points."neuroevo.models"]
    tiny = "my_pkg.tiny:TinyMLP"

Entry points are read the first time a registry is looked at.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["Lazy", "Registry", "lazy_exports"]

_NAME = re.compile(r"[a-z][a-z0-9_]*")

HOOK = "params_class"
"""The class attribute of every registered component naming its params class."""


def _import(path: str) -> Any:
    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except AttributeError:
        raise ImportError(f"module {module!r} has no {name!r} (registered as {path!r})") from None


def _check_path(path: str) -> str:
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"an import path is 'package.module:Class', got {path!r}")
    return path


class Lazy:
    """A registry entry: a component, imported on first use, and optionally its params class
    in a module that is cheap to import.

    Args:
        path: ``"package.module:Class"`` of the component.
        params: ``"package.module:Class"`` of its params class (or the class), for a
            component whose own module is expensive to import; None reads it from the component.
    """

    def __init__(self, path: str, params: str | type | None = None):
        self.path = _check_path(path)
        self.params = _check_path(params) if isinstance(params, str) else params
        self._component: type | None = None

    def params_class(self) -> type | None:
        """The component's params class, importing the component only when no light path
        was given."""
        if self.params is None:
            return getattr(self.load(), HOOK, None)
        if isinstance(self.params, str):
            self.params = _import(self.params)
        return self.params

    def load(self) -> type:
        """Imports the component (once).

        Raises:
            TypeError: Its ``params_class`` is not the params class given.
        """
        if self._component is None:
            component = _import(self.path)
            if self.params is not None:
                declared = self.params_class()
                actual = getattr(component, HOOK, None)
                if actual is not declared:
                    raise TypeError(
                        f"{self.path}.{HOOK} is {actual!r} but it is registered with "
                        f"params {declared!r}; make them agree"
                    )
            self._component = component
        return self._component

    def __repr__(self) -> str:
        return f"Lazy({self.path!r})"


class Registry(Mapping[str, type]):
    """Components by config name; see the module docstring.

    Args:
        what: What the entries are, for messages (``"model"``).
        entries: name -> import path, class or :class:`Lazy`, in the order choice lists show.
        entry_points: Python entry-point group whose entries are registered on first use.
    """

    def __init__(
        self,
        what: str,
        entries: Mapping[str, str | type | Lazy] | None = None,
        entry_points: str | None = None,
    ):
        self.what = what
        self._entries: dict[str, Lazy | type] = {}
        self._entry_points = entry_points
        for name, entry in (entries or {}).items():
            self.register(name, entry)

    def register(
        self,
        name: str,
        component: str | type | Lazy,
        *,
        params: str | type | None = None,
        replace: bool = False,
    ) -> None:
        """Adds a component under ``name``, so configs can select it.

        Args:
            name: Its config name: lower case letters, digits and ``_``, starting with a letter.
            component: ``"package.module:Class"`` (imported on first build) or the class.
            params: Import path (or class) of its params class, when importing the
                component is expensive (see the module docstring).
            replace: Allow replacing an existing entry.

        Raises:
            ValueError: A bad name or path, or a name already registered (without ``replace``).
        """
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(
                f"a {self.what} name is lower case letters, digits and '_' starting with a "
                f"letter, got {name!r}"
            )
        if not replace and name in self._entries:
            raise ValueError(
                f"{self.what} {name!r} is already registered ({self._entries[name]!r}); pass "
                "replace=True to replace it"
            )
        if isinstance(component, str):
            component = Lazy(component, params)
        elif params is not None:
            raise ValueError("params= goes with an import path, not with a class")
        self._entries[name] = component

    def _load_entry_points(self) -> None:
        group, self._entry_points = self._entry_points, None
        if group is None:
            return
        for point in importlib.metadata.entry_points(group=group):
            if point.name not in self._entries:
                self.register(point.name, point.value)

    def __getitem__(self, name: str) -> type:
        self._load_entry_points()
        entry = self._entries[name]
        return entry.load() if isinstance(entry, Lazy) else entry

    def __iter__(self) -> Iterator[str]:
        self._load_entry_points()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self._load_entry_points()
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load_entry_points()
        return name in self._entries

    def params_class(self, name: str) -> type | None:
        """The params class of entry ``name`` (None: it takes no params of its own), read
        without importing a component registered with ``params=``."""
        self._load_entry_points()
        entry = self._entries[name]
        if isinstance(entry, Lazy):
            return entry.params_class()
        return getattr(entry, HOOK, None)

    def declared(self, name: str, attribute: str) -> Any:
        """A capability entry ``name``'s params class declares (``image_observations``, ...;
        None when it has no params class or does not say)."""
        return getattr(self.params_class(name), attribute, None)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {self._entries!r})"


def lazy_exports(package: str, exports: Mapping[str, tuple[str, ...]]) -> Any:
    """A module ``__getattr__`` for ``package`` that imports each name of ``exports``
    (module path -> names) from its module on first use, so importing the package stays cheap.
    """

    def attribute(name: str) -> Any:
        for module, names in exports.items():
            if name in names:
                return getattr(importlib.import_module(module), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return attribute
