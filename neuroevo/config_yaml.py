"""YAML as configs read it: ``1e-3`` is a number, a repeated key is an error, and a syntax
error names its line and column (a :class:`~neuroevo.params.ParamError`)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from neuroevo.params import ParamError

__all__ = ["Loader", "parse_yaml"]


class Loader(yaml.SafeLoader):
    """YAML loader that reads ``1e-3`` as a number and rejects duplicate keys.

    PyYAML follows YAML 1.1, where ``1e-3`` and ``2.5e8`` are strings; configs are full of
    such numbers. A repeated key would silently keep only its last value.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key}'", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str, source: str) -> Any:
    """Parses YAML text, turning syntax errors into a ConfigError with line and column."""
    try:
        return yaml.load(text, Loader=Loader)  # Loader derives from SafeLoader: no objects
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ParamError(f"{source}: invalid YAML{where}: {err.problem or err}") from None
    except yaml.YAMLError as err:
        raise ParamError(f"{source}: invalid YAML: {err}") from None
