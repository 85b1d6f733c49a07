"""Ask/tell optimizers (GA, ES, random search, novelty search, PGPE, SNES, xNES, CEM, CMA-ES,
sep-CMA-ES, LM-MA-ES, ARS, MAP-Elites, CMA-ME, CMA-MAE) and the registry that builds them by name.

neuroevo maximises fitness. See :mod:`neuroevo.algorithms.base` for the interface and
:func:`optimize` for the one-call notebook loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from neuroevo.algorithms.base import GenerationSummary, Optimizer
from neuroevo.algorithms.fitness_loop import optimize
from neuroevo.core.params import check_choice, from_mapping
from neuroevo.core.registry import Registry, lazy_exports
from neuroevo.evaluation.request import EvalRequest, Phase
from neuroevo.genomes.genome import DEFAULT_CACHE_BYTES

if TYPE_CHECKING:
    from neuroevo.algorithms.ars import ARS, ARSParams
    from neuroevo.algorithms.cem import CEM, CEMParams
    from neuroevo.algorithms.cma_es import CMAES, CMAESParams
    from neuroevo.algorithms.cma_me import CMAMAE, CMAME, CMAMAEParams, CMAMEParams
    from neuroevo.algorithms.es import ES, ESParams
    from neuroevo.algorithms.ga import GA, Decay, GAParams, MutationSchedule
    from neuroevo.algorithms.ga_ns import GANS, GANSParams
    from neuroevo.algorithms.lm_ma_es import LMMAES, LMMAESParams
    from neuroevo.algorithms.map_elites import MAPElites, MAPElitesParams
    from neuroevo.algorithms.novelty import NoveltyArchive, knn_novelty
    from neuroevo.algorithms.nses import NSES, NSRAES, NSRES, NSESParams, NSRAESParams
    from neuroevo.algorithms.pgpe import PGPE, PGPEParams
    from neuroevo.algorithms.random_search import RandomSearch, RandomSearchParams
    from neuroevo.algorithms.sep_cma_es import SepCMAES, SepCMAESParams
    from neuroevo.algorithms.snes import SNES, SNESParams
    from neuroevo.algorithms.xnes import XNES, XNESParams
    from neuroevo.genomes.noise import NoiseTable

__all__ = [
    "ALGORITHMS",
    "ARS",
    "CEM",
    "CMAES",
    "CMAMAE",
    "CMAME",
    "ES",
    "GA",
    "GANS",
    "LMMAES",
    "NSES",
    "NSRAES",
    "NSRES",
    "PGPE",
    "SNES",
    "XNES",
    "ARSParams",
    "CEMParams",
    "CMAESParams",
    "CMAMAEParams",
    "CMAMEParams",
    "Decay",
    "ESParams",
    "EvalRequest",
    "GANSParams",
    "GAParams",
    "GenerationSummary",
    "LMMAESParams",
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
    "algorithm_params",
    "knn_novelty",
    "make_algorithm",
    "optimize",
    "strategy_class",
]

ALGORITHMS = Registry(
    "algorithm",
    {
        "ga": "neuroevo.algorithms.ga:GA",
        "es": "neuroevo.algorithms.es:ES",
        "random_search": "neuroevo.algorithms.random_search:RandomSearch",
        "ns_es": "neuroevo.algorithms.nses:NSES",
        "nsr_es": "neuroevo.algorithms.nses:NSRES",
        "nsra_es": "neuroevo.algorithms.nses:NSRAES",
        "ga_ns": "neuroevo.algorithms.ga_ns:GANS",
        "pgpe": "neuroevo.algorithms.pgpe:PGPE",
        "snes": "neuroevo.algorithms.snes:SNES",
        "xnes": "neuroevo.algorithms.xnes:XNES",
        "cem": "neuroevo.algorithms.cem:CEM",
        "sep_cma_es": "neuroevo.algorithms.sep_cma_es:SepCMAES",
        "cma_es": "neuroevo.algorithms.cma_es:CMAES",
        "lm_ma_es": "neuroevo.algorithms.lm_ma_es:LMMAES",
        "ars": "neuroevo.algorithms.ars:ARS",
        "map_elites": "neuroevo.algorithms.map_elites:MAPElites",
        "cma_me": "neuroevo.algorithms.cma_me:CMAME",
        "cma_mae": "neuroevo.algorithms.cma_me:CMAMAE",
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
        "neuroevo.algorithms.pgpe": ("PGPE", "PGPEParams"),
        "neuroevo.algorithms.snes": ("SNES", "SNESParams"),
        "neuroevo.algorithms.xnes": ("XNES", "XNESParams"),
        "neuroevo.algorithms.cem": ("CEM", "CEMParams"),
        "neuroevo.algorithms.sep_cma_es": ("SepCMAES", "SepCMAESParams"),
        "neuroevo.algorithms.cma_es": ("CMAES", "CMAESParams"),
        "neuroevo.algorithms.lm_ma_es": ("LMMAES", "LMMAESParams"),
        "neuroevo.algorithms.ars": ("ARS", "ARSParams"),
        "neuroevo.algorithms.map_elites": ("MAPElites", "MAPElitesParams"),
        "neuroevo.algorithms.cma_me": ("CMAME", "CMAMAE", "CMAMEParams", "CMAMAEParams"),
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
            or an invalid hyperparameter value (a :class:`~neuroevo.core.params.ParamError`).

    Example:
        >>> from neuroevo.genomes.noise import NoiseTable
        >>> noise = NoiseTable(seed=0, size=10_000, cache_dir=False)
        >>> algorithm = make_algorithm(
        ...     "ga", num_params=3, scales=1.0, noise=noise, population_size=8, truncation=2,
        ...     validation_candidates=2, validation_episodes=1,
        ... )
        >>> summaries = optimize(lambda w, seed: -float(w @ w), algorithm, generations=2)
        >>> [s.generation for s in summaries], algorithm.params.mutation_power
        ([0, 1], 0.002)
    """
    params = algorithm_params(name, **hyperparams)
    strategy = strategy_class(name, params)
    return strategy(num_params, scales, noise, seed=seed, params=params, cache_size=cache_size)


def strategy_class(name: str, params: Any) -> type[Optimizer]:
    """The optimizer class that runs registered ``name`` with validated ``params``: the
    registered class, wrapped in IPOP / BIPOP restarts when a CMA-type strategy's
    ``restarts`` asks for them."""
    strategy = ALGORITHMS[name]
    restarts = getattr(params, "restarts", None)
    if restarts is not None and restarts.kind.value != "none":
        from neuroevo.algorithms.restarts import with_restarts

        strategy = with_restarts(strategy)
    return strategy


def algorithm_params(name: str, **hyperparams: Any) -> Any:
    """The validated hyperparameters of registered optimizer ``name`` (its ``params_class``),
    to check what a run needs before building the optimizer.

    Raises:
        ValueError: For an unknown name or hyperparameter, or an invalid value.
    """
    check_choice(name, ALGORITHMS, "algorithm")
    return from_mapping(ALGORITHMS[name].params_class, hyperparams, name)
