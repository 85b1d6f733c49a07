"""Ask/tell optimizers (GA, ES, random search, novelty search) and the registry that builds
them by name.

neuroevo maximises fitness. See :mod:`neuroevo.algorithms.base` for the interface and
:func:`optimize` for the one-call notebook loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from neuroevo.algorithms.base import (
    EvalRequest,
    GenerationSummary,
    Optimizer,
    Phase,
    optimize,
)
from neuroevo.genome import DEFAULT_CACHE_BYTES
from neuroevo.params import check_choice, from_mapping
from neuroevo.registry import Registry, lazy_exports

if TYPE_CHECKING:
    from neuroevo.algorithms.es import ES, ESParams
    from neuroevo.algorithms.ga import GA, Decay, GAParams, MutationSchedule
    from neuroevo.algorithms.ga_ns import GANS, GANSParams
    from neuroevo.algorithms.novelty import NoveltyArchive, knn_novelty
    from neuroevo.algorithms.nses import NSES, NSRAES, NSRES, NSESParams, NSRAESParams
    from neuroevo.algorithms.random_search import RandomSearch, RandomSearchParams
    from neuroevo.noise import NoiseTable

__all__ = [
    "ALGORITHMS",
    "ES",
    "GA",
    "GANS",
    "NSES",
    "NSRAES",
    "NSRES",
    "Decay",
    "ESParams",
    "EvalRequest",
    "GANSParams",
    "GAParams",
    "GenerationSummary",
    "MutationSchedule",
    "NSESParams",
    "NSRAESParams",
    "NoveltyArchive",
    "Optimizer",
    "Phase",
    "RandomSearch",
    "RandomSearchParams",
    "knn_novelty",
    "make_algorithm",
    "optimize",
]

ALGORITHMS = Registry(
    "algorithm",
    "params_class",
    {
        "ga": "neuroevo.algorithms.ga:GA",
        "es": "neuroevo.algorithms.es:ES",
        "random_search": "neuroevo.algorithms.random_search:RandomSearch",
        "ns_es": "neuroevo.algorithms.nses:NSES",
        "nsr_es": "neuroevo.algorithms.nses:NSRES",
        "nsra_es": "neuroevo.algorithms.nses:NSRAES",
        "ga_ns": "neuroevo.algorithms.ga_ns:GANS",
    },
    entry_points="neuroevo.algorithms",
)
"""Optimizer classes by config name, imported on first use; each declares its hyperparameters
(and ``needs_behavior``) as ``params_class``, which is also its section of the training config
(``algorithm.<name>``). Add one with ``ALGORITHMS.register(name, "package.module:Class")``."""

__getattr__ = lazy_exports(
    __name__,
    {
        "neuroevo.algorithms.es": ("ES", "ESParams"),
        "neuroevo.algorithms.ga": ("GA", "Decay", "GAParams", "MutationSchedule"),
        "neuroevo.algorithms.ga_ns": ("GANS", "GANSParams"),
        "neuroevo.algorithms.novelty": ("NoveltyArchive", "knn_novelty"),
        "neuroevo.algorithms.nses": ("NSES", "NSRAES", "NSRES", "NSESParams", "NSRAESParams"),
        "neuroevo.algorithms.random_search": ("RandomSearch", "RandomSearchParams"),
    },
)
"""The strategies and their parameter classes, imported on first use."""


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
        **hyperparams: Fields of the algorithm's ``params_class`` (e.g. ``population_size``);
            nested sections may be given as mappings.

    Returns:
        The optimizer, at generation 0.

    Raises:
        ValueError: For an unknown name or hyperparameter (the message lists the valid ones),
            or an invalid hyperparameter value (a :class:`~neuroevo.params.ParamError`).

    Example:
        >>> from neuroevo.noise import NoiseTable
        >>> noise = NoiseTable(seed=0, size=10_000, cache_dir=False)
        >>> algorithm = make_algorithm(
        ...     "ga", num_params=3, scales=1.0, noise=noise, population_size=8, truncation=2,
        ...     validation_candidates=2, validation_episodes=1,
        ... )
        >>> summaries = optimize(lambda w, seed: -float(w @ w), algorithm, generations=2)
        >>> [s.generation for s in summaries], algorithm.params.mutation_power
        ([0, 1], 0.002)
    """
    check_choice(name, ALGORITHMS, "algorithm")
    cls = ALGORITHMS[name]
    params = from_mapping(cls.params_class, hyperparams, name)
    return cls(num_params, scales, noise, seed=seed, params=params, cache_size=cache_size)
