"""The NaN/inf policy: a genome whose mean return is NaN or +-inf counts as the worst of its
phase, is counted in ``GenerationSummary.nan_count`` and warned about once per optimizer; if
every genome of a selecting phase is non-finite, ``tell`` raises ``ValueError`` and leaves the
state unchanged. The centre phase only reports, so its NaN stays visible.
"""

from __future__ import annotations

import numpy as np

from neuroevo.evaluation.request import Phase

__all__ = ["nonfinite_warning", "phase_fitness", "replace_nonfinite"]


def replace_nonfinite(fitness: np.ndarray) -> tuple[np.ndarray, int]:
    """Implements the NaN/inf policy: a non-finite fitness counts as worse than all others.

    NaN, +inf and -inf are replaced by ``min - max(1, max - min)`` of the finite values, a
    finite number strictly below every finite fitness, so ranks, standardisation and
    selection all treat it as the worst without special cases.

    Args:
        fitness: float [n].

    Returns:
        (float64 [n] with only finite values, number of values replaced).

    Raises:
        ValueError: If no value is finite (no update can be made from that).
    """
    fitness = np.array(fitness, dtype=np.float64)
    bad = ~np.isfinite(fitness)
    count = int(bad.sum())
    if count == fitness.size:
        raise ValueError(
            f"all {fitness.size} fitness values are NaN or inf; nothing can be learned from "
            f"this batch, check the fitness function or environment"
        )
    if count:
        good = fitness[~bad]
        fitness[bad] = good.min() - max(1.0, good.max() - good.min())
    return fitness, count


def phase_fitness(
    phase: Phase, raw: np.ndarray, training: np.ndarray | None, sign: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None, int]:
    """The fitness a phase selects and updates with, after the policy.

    Args:
        phase: the phase the values are of.
        raw: float64 [n], each genome's mean return (what summaries report).
        training: float64 [n] or None, each genome's mean training return (what selection
            sees when the evaluator sets it); NaN where ``raw`` is not finite.
        sign: float64 [n] or None, each genome's mean sign return.

    Returns:
        ``(fitness, sign fitness, number of non-finite genomes)``; for the centre phase, the
        values as they are.

    Raises:
        ValueError: every genome of a selecting phase is non-finite.
    """
    if phase is Phase.CENTER:  # Only reported, never selected: keep NaN visible.
        return raw, sign, int(np.sum(~np.isfinite(raw)))
    if training is None:
        fitness, nan_count = replace_nonfinite(raw)
    else:
        fitness, nan_count = replace_nonfinite(np.where(np.isfinite(raw), training, np.nan))
    if sign is not None:
        sign, _ = replace_nonfinite(np.where(np.isfinite(raw), sign, np.nan))
    return fitness, sign, nan_count


def nonfinite_warning(nan_count: int, genomes: int, generation: int, phase: Phase) -> str:
    """What the one warning of an optimizer says when genomes had non-finite fitness."""
    return (
        f"{nan_count} of {genomes} genomes had NaN or inf fitness in generation "
        f"{generation} ({phase.value}); they count as the worst and are "
        f"reported in GenerationSummary.nan_count (warned once per optimizer)"
    )
