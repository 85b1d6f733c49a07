"""neuroevo: deep neuroevolution (GA, ES, random search) at the speed of the hardware.

Importing the package is cheap: TensorFlow and the C++ ops load only when a module that needs
them is imported (``neuroevo.envs``, ``neuroevo.models``, ``neuroevo.evaluation``) or when
``train`` builds a run. The short API (``neuroevo.api``) is imported on first use::

    import neuroevo as ne

    result = ne.train("configs/es_hopper.yaml", overrides={"budget.generations": 3})
    best = ne.optimize(lambda x: (x**2).sum(axis=1), dims=10, minimize=True)
    sweep = ne.sweep("configs/es_hopper.yaml", "sweeps/hopper", grid={"seed": [0, 1]})
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = ("ElitePolicy", "OptimizeResult", "TrainResult", "optimize", "train")

__all__ = [
    "ElitePolicy",
    "OptimizeResult",
    "TrainResult",
    "__version__",
    "optimize",
    "sweep",
    "train",
]


def __getattr__(name: str) -> Any:
    """``train``, ``optimize`` and their result types (:mod:`neuroevo.api`) and ``sweep``
    (:mod:`neuroevo.sweeps.api`), imported on first use."""
    if name in _API:
        return getattr(importlib.import_module("neuroevo.api"), name)
    if name == "sweep":
        return importlib.import_module("neuroevo.sweeps.api").sweep
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
