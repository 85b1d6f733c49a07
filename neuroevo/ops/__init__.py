"""Loads neuroevo's compiled TensorFlow op libraries, building them when missing or stale.

``load("atari")`` returns the module that ``tf.load_op_library`` makes, with one Python function
per registered op (``neuroevo_atari_step`` and so on). A library is loaded at most once per
process: TensorFlow refuses to register the same op names twice.
"""

from __future__ import annotations

import functools
from types import ModuleType

from neuroevo.ops.build import LIBRARIES, OpBuildError, build_library, library_key

__all__ = ["LIBRARIES", "OpBuildError", "build_library", "library_key", "load"]


@functools.cache
def load(name: str) -> ModuleType:
    """Returns the op module of library ``name`` (one of ``LIBRARIES``), building it if needed.

    Raises:
        ValueError: ``name`` is not a known library.
        OpBuildError: the library could not be compiled; the message names the missing tool
            or shows the compiler's error.
    """
    import tensorflow as tf

    path = build_library(name)
    try:
        return tf.load_op_library(str(path))
    except tf.errors.NotFoundError as exc:
        raise OpBuildError(
            f"the {name} op library at {path} failed to load ({exc}); delete it and retry, "
            "or rebuild with `python -m neuroevo.doctor --rebuild`."
        ) from exc
