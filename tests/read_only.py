"""Read-only directories for tests, also when the tests run as root.

Root writes through file permissions, so ``chmod`` cannot make a directory read-only for it:
as root the directory becomes a tmpfs mounted read-only (``mount -o remount,ro``), as any
other user it is ``chmod a-w``. Writes there then fail as on a read-only disk (``EROFS`` for
root, ``EACCES`` otherwise); the test is skipped only for root without the right to mount.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def read_only_directory(path: Path, fill: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Creates ``path``, lets ``fill`` write into it, then makes it read-only until the
    context ends (when it is made writable, or unmounted, again)."""
    path.mkdir(parents=True)
    if os.geteuid() == 0:
        mount = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(path)], capture_output=True
        )
        if mount.returncode != 0:
            pytest.skip(f"root cannot mount a read-only tmpfs here: {mount.stderr.strip()}")
        try:
            if fill is not None:
                fill(path)
            subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
            yield path
        finally:
            subprocess.run(["umount", "-l", str(path)], check=True)
        return
    if fill is not None:
        fill(path)
    modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")]}
    for p, mode in modes.items():
        p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        yield path
    finally:
        for p, mode in modes.items():
            p.chmod(mode)
