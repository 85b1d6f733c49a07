"""Ask/tell optimizers (GA, ES, random search, novelty search, PGPE, SNES, xNES, CEM, CMA-ES,
sep-CMA-ES, MAP-Elites) and the registry that builds them by name.

neuroevo maximises fitness. See :mod:`neuroevo.algorithms.base` for the interface and
:func:`optimize` for the one-call notebook loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neuroevo.algorithms.base import (
    EvalRequest,
    GenerationSummary,
    Optimizer,
    Phase,
    optimize,
)
from neuroevo.algorithms.cem import CEM, CEMParams
from neuroevo.algorithms.cma_es import CMAES, CMAESParams
from neuroevo.algorithms.es import ES, ESParams
from neuroevo.algorithms.ga import GA, Decay, GAParams, MutationSchedule
from neuroevo.algorithms.ga_ns import GANS, GANSParams
from neuroevo.algorithms.map_elites import MAPElites, MAPElitesParams
from neuroevo.algorithms.novelty import NoveltyArchive, knn_novelty
from neuroevo.algorithms.nses import NSES, NSRAES, NSRES, NSESParams, NSRAESParams
from neuroevo.algorithms.pgpe import PGPE, PGPEParams
from neuroevo.algorithms.random_search import RandomSearch, RandomSearchParams
from neuroevo.algorithms.sep_cma_es import SepCMAES, SepCMAESParams
from neuroevo.algorithms.snes import SNES, SNESParams
from neuroevo.algorithms.xnes import XNES, XNESParams
from neuroevo.genome import DEFAULT_CACHE_BYTES
from neuroevo.noise import NoiseTable
from neuroevo.params import check_choice, from_mapping
from neuroevo.registry import Registry

__all__ = [
    "ALGORITHMS",
    "CEM",
    "CMAES",
    "ES",
    "GA",
    "GANS",
    "NSES",
    "NSRAES",
    "NSRES",
    "PGPE",
    "SNES",
    "XNES",
    "CEMParams",
    "CMAESParams",
    "Decay",
    "ESParams",
    "EvalRequest",
    "GANSParams",
    "GAParams",
    "GenerationSummary",
    "MAPElites",
    "MAPElitesParams",
    "MutationSchedule",
    "NSESParams",
    "NSRAESParams",
    "NoveltyArchive",
    "Optimizer",
    "PGPEParams",
    "Phase",
    "RandomSearch",
    "RandomSearchParams",
    "SNESParams",
    "SepCMAES",
    "SepCMAESParams",
    "XNESParams",
    "knn_novelty",
    "make_algorithm",
    "optimize",
]

ALGORITHMS = Registry(
    {
        "ga": GA,
        "es": ES,
        "random_search": RandomSearch,
        "ns_es": NSES,
        "nsr_es": NSRES,
        "nsra_es": NSRAES,
        "ga_ns": GANS,
        "pgpe": PGPE,
        "snes": SNES,
        "xnes": XNES,
        "cem": CEM,
        "sep_cma_es": SepCMAES,
        "cma_es": CMAES,
        "map_elites": MAPElites,
    }
)
"""Optimizer classes by config name; each declares its hyperparameters as ``params_class``,
which is also its section of the training config (``algorithm.<name>``)."""


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
