"""``optimize``: the ask -> decode -> evaluate -> tell loop in this process, for a plain Python
fitness function (notebooks, toy problems); training on environments uses the evaluator."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from neuroevo.algorithms.base import GenerationSummary, Optimizer, require

__all__ = ["FitnessFn", "optimize"]


FitnessFn = Callable[[np.ndarray, int], "float | tuple[float, np.ndarray]"]


def optimize(
    fitness_fn: FitnessFn,
    algorithm: Optimizer,
    generations: int,
    callback: Callable[[GenerationSummary], None] | None = None,
) -> list[GenerationSummary]:
    """Runs ``generations`` generations of ask -> decode -> evaluate -> tell in this process.

    Meant for notebooks and toy problems; training on environments uses the evaluator.

    Args:
        fitness_fn: ``fitness_fn(weights, episode_seed) -> float`` with weights a read-only
            float32 [P] vector; higher is better. Use ``episode_seed`` for any randomness so
            runs replay exactly. Each call counts as an episode of one reward (its sign
            return, for sign-rank shaping, is the sign of the fitness). For an algorithm that
            ``needs_behavior`` (novelty search) it returns ``(return, behaviour)``, the
            behaviour a float vector of fixed length.
        algorithm: The optimizer, possibly mid-run (e.g. after ``load_state_dict``).
        generations: Number of generations to complete.
        callback: Called with each generation's summary (e.g. ``print``).

    Returns:
        The summaries of the generations run, in order.

    Raises:
        ValueError: If ``generations`` < 1.

    Example:
        Maximise ``-|w - 1|^2`` over 5 weights with ES:

        >>> from neuroevo.algorithms import ES, ESParams
        >>> from neuroevo.genomes.noise import NoiseTable
        >>> es = ES(
        ...     num_params=5,
        ...     scales=1.0,
        ...     noise=NoiseTable(seed=0, size=100_000, cache_dir=False),
        ...     params=ESParams(population_size=20, sigma=0.1, learning_rate=0.1, l2_coeff=0.0),
        ... )
        >>> history = optimize(lambda w, seed: -float(((w - 1) ** 2).sum()), es, generations=60)
        >>> history[-1].elite_score > history[0].elite_score
        True
    """
    require(generations >= 1, f"generations must be >= 1, got {generations}")
    summaries: list[GenerationSummary] = []
    weights = np.empty(algorithm.num_params, dtype=np.float32)
    view = weights.view()
    view.flags.writeable = False
    while len(summaries) < generations:
        request = algorithm.ask()
        returns = np.empty(request.episode_seeds.shape, dtype=np.float64)
        behaviors: list[np.ndarray] = []
        for row, genome in enumerate(request.genomes):
            algorithm.decoder.decode(genome, out=weights)
            for col, seed in enumerate(request.episode_seeds[row].tolist()):
                outcome = fitness_fn(view, seed)
                if algorithm.needs_behavior:
                    returns[row, col], behavior = outcome
                    behaviors.append(np.asarray(behavior, np.float64).ravel())
                else:
                    returns[row, col] = outcome
        stacked = None
        if behaviors:
            stacked = np.stack(behaviors).reshape(*returns.shape, -1)
        # Each call is a one-reward episode, so its sign return is the sign of its fitness.
        summary = algorithm.tell(request, returns, sign_returns=np.sign(returns), behaviors=stacked)
        if summary is not None:
            summaries.append(summary)
            if callback is not None:
                callback(summary)
    return summaries
