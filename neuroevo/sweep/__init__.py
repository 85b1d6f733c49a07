"""Hyperparameter sweeps and population-based training on Ray Tune (docs/SWEEPS.md).

``python -m neuroevo.sweep`` (:mod:`neuroevo.cli.sweep`) and ``ne.sweep(...)``
(:func:`neuroevo.sweep.api.sweep`) run many trials of one config, each an ordinary run
directory inside the sweep directory. Called, this package is ``neuroevo.sweep.api.sweep``:
the package attribute ``neuroevo.sweep`` is this package once it is imported, so the package
itself answers ``ne.sweep(...)``. Importing it imports neither Ray nor TensorFlow.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    """This package's type: calling it runs a sweep (``neuroevo.sweep.api.sweep``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from neuroevo.sweep.api import sweep

        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
