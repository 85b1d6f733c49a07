"""YAML as configs read it: ``1e-3`` is a number, a repeated key is an error, a syntax error
names its line and column (a :class:`~neuroevo.core.params.ParamError`), and a config file is a
regular file of at most :data:`MAX_CONFIG_BYTES` (a FIFO would block, ``/dev/zero`` never
end)."""

from __future__ import annotations

import os
import re
import stat
from typing import Any

import yaml

from neuroevo.core.params import ParamError

__all__ = ["MAX_CONFIG_BYTES", "Loader", "parse_yaml", "read_config_file"]

MAX_CONFIG_BYTES = 1 << 20
"""Largest config file read (the shipped ones are a few KiB)."""


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


def read_config_file(path: str | os.PathLike[str], source: str) -> Any:
    """The parsed YAML of config file ``path`` (``source`` names it in messages).

    The file is opened without blocking and checked on its open descriptor: a FIFO, a device
    or a directory is refused at once, and at most :data:`MAX_CONFIG_BYTES` are read.

    Raises:
        ParamError: the file is missing, not a regular file, too large, unreadable, not UTF-8
            or not valid YAML.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ParamError(f"{source} not found") from None
    except OSError as err:
        raise ParamError(f"{source} could not be read: {err.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise ParamError(f"{source} is {kind}; give a YAML file")
    with open(fd, "rb") as file:
        try:
            data = file.read(MAX_CONFIG_BYTES + 1)
        except OSError as err:
            raise ParamError(f"{source} could not be read: {err.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ParamError(
            f"{source} is larger than {MAX_CONFIG_BYTES >> 20} MiB, far beyond any config; "
            "give the YAML config file"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ParamError(f"{source} could not be read: not UTF-8 text ({err.reason})") from None
    return parse_yaml(text, source)
