"""Ask/tell optimizers (GA, ES, random search) and the registry that builds them by name.

neuroevo maximises fitness. See :mod:`neuroevo.algorithms.base` for the interface and
:func:`optimize` for the one-call notebook loop.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from neuroevo.algorithms.base import (
    EvalRequest,
    GenerationSummary,
    Optimizer,
    Phase,
    optimize,
)
from neuroevo.algorithms.es import ES, ESParams
from neuroevo.algorithms.ga import GA, Decay, GAParams, SigmaSchedule
from neuroevo.algorithms.random_search import RandomSearch, RandomSearchParams
from neuroevo.genome import DEFAULT_CACHE_BYTES
from neuroevo.noise import NoiseTable

__all__ = [
    "ALGORITHMS",
    "ES",
    "GA",
    "Decay",
    "ESParams",
    "EvalRequest",
    "GAParams",
    "GenerationSummary",
    "Optimizer",
    "Phase",
    "RandomSearch",
    "RandomSearchParams",
    "SigmaSchedule",
    "make_algorithm",
    "optimize",
]

ALGORITHMS: dict[str, type[Optimizer]] = {"ga": GA, "es": ES, "random_search": RandomSearch}
"""Optimizer classes by config name."""


def make_algorithm(
    name: str,
    *,
    num_params: int,
    scales: np.ndarray | float,
    noise: NoiseTable,
    seed: int = 0,
    cache_size: int = DEFAULT_CACHE_BYTES,
    **hyperparams: Any,
) -> Optimizer:
    """Builds a registered optimizer; hyperparameters not given keep the paper defaults.

    Args:
        name: A key of :data:`ALGORITHMS`.
        num_params: P.
        scales: Per-parameter initialisation std, float32 [P] or one float.
        noise: The shared noise table.
        seed: Optimizer seed.
        cache_size: Byte budget of the decoder's parent cache.
        **hyperparams: Fields of the algorithm's params class (e.g. ``population_size``).

    Returns:
        The optimizer, at generation 0.

    Raises:
        ValueError: For an unknown name or hyperparameter (the message lists the valid ones),
            or an invalid hyperparameter value.
    """
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; valid names: {sorted(ALGORITHMS)}")
    cls = ALGORITHMS[name]
    valid = {f.name for f in dataclasses.fields(cls.params_class)}
    unknown = sorted(set(hyperparams) - valid)
    if unknown:
        raise ValueError(
            f"unknown {name} hyperparameters {unknown}; valid ones are {sorted(valid)}"
        )
    params = cls.params_class(**hyperparams)
    return cls(num_params, scales, noise, seed=seed, params=params, cache_size=cache_size)
