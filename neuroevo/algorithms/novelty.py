"""Novelty: the mean distance from a behaviour to its k nearest neighbours, and the archive.

Novelty search (Lehman & Stanley 2011) rewards behaving differently from what was seen before:
a behaviour characterisation (BC, a vector per episode such as the final (x, y) of a robot or
the 128 bytes of Atari RAM) scores the mean Euclidean distance to its k nearest neighbours
among the archived BCs (k = 10 in Such et al. 2017 and Conti et al. 2018, as in Uber's
``es_distributed/nses.py``). With fewer than k points the mean runs over all of them.

The search is exact brute force, chunked so memory stays bounded: squared distances come from
one matrix product per chunk (``|q|^2 + |a|^2 - 2 q.a``), then a partial sort picks the k
smallest. uint8 BCs (Atari RAM) are products of small integers, so float32 arithmetic is exact
for them (every partial sum stays below 2^24); any other dtype is computed in float64.
``docs/PERFORMANCE.md`` has the cost at paper scale and why this beat the libraries measured.

The :class:`NoveltyArchive` is part of an optimizer's checkpointed state: its rows are saved
as one array and restored bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["DEFAULT_K", "NoveltyArchive", "knn_novelty"]

DEFAULT_K = 10
"""Neighbours in the novelty score, as in the papers."""

CHUNK_BYTES = 64 << 20
"""Size of one block of the query-by-reference distance matrix (bounds memory)."""

_EXACT_FLOAT32_BYTES = 255 * 255 * 256  # uint8 BCs up to 256 long: squared sums < 2^24


def _compute_dtype(*arrays: np.ndarray) -> type:
    """float32 when every array is uint8 and short enough to stay exact, else float64."""
    exact = all(a.dtype == np.uint8 for a in arrays)
    width = arrays[0].shape[1] if arrays[0].ndim == 2 else 0
    return np.float32 if exact and 255 * 255 * width < _EXACT_FLOAT32_BYTES else np.float64


def knn_novelty(
    queries: np.ndarray,
    reference: np.ndarray,
    k: int = DEFAULT_K,
    exclude_self: bool = False,
) -> np.ndarray:
    """Mean Euclidean distance from each query to its ``k`` nearest reference points.

    Args:
        queries: [n, d] behaviours to score (any real dtype).
        reference: [m, d] behaviours to compare with (the archive, maybe plus the population).
        k: Neighbours averaged; with ``m < k`` (after ``exclude_self``) all of them.
        exclude_self: ``queries`` are the first n rows of ``reference`` and a point is not its
            own neighbour (GA-NS scores the population against itself plus the archive).

    Returns:
        float64 [n]; all zeros when there is nothing to compare with.

    Raises:
        ValueError: On mismatched widths, a non-2-D input, ``k < 1``, or ``exclude_self``
            with fewer reference rows than queries.
    """
    queries, reference = np.asarray(queries), np.asarray(reference)
    if queries.ndim != 2 or reference.ndim != 2 or queries.shape[1] != reference.shape[1]:
        raise ValueError(
            f"queries [n, d] and reference [m, d] must be 2-D with the same d, got shapes "
            f"{queries.shape} and {reference.shape}"
        )
    if k < 1:
        raise ValueError(f"k must be >= 1 neighbours, got {k}")
    n, m = len(queries), len(reference)
    if exclude_self and m < n:
        raise ValueError(f"exclude_self needs the {n} queries among the {m} reference rows")
    available = m - 1 if exclude_self else m
    result = np.zeros(n, np.float64)
    if n == 0 or available <= 0:
        return result
    k = min(k, available)
    dtype = _compute_dtype(queries, reference)
    ref = reference.astype(dtype)
    ref_sq = np.einsum("ij,ij->i", ref, ref)
    rows = max(1, CHUNK_BYTES // (np.dtype(dtype).itemsize * m))
    for start in range(0, n, rows):
        q = queries[start : start + rows].astype(dtype)
        d2 = ref_sq[None, :] - 2 * (q @ ref.T)
        d2 += np.einsum("ij,ij->i", q, q)[:, None]
        np.maximum(d2, 0, out=d2)
        if exclude_self:
            d2[np.arange(len(q)), np.arange(start, start + len(q))] = np.inf
        nearest = np.partition(d2, k - 1, axis=1)[:, :k]
        result[start : start + len(q)] = np.sqrt(nearest.astype(np.float64)).mean(axis=1)
    return result


class NoveltyArchive:
    """The behaviours added so far, with the novelty of new ones against them.

    Grows by doubling its buffer, so adding one BC per generation costs O(1) amortised.

    Args:
        k: Neighbours in the novelty score.
    """

    def __init__(self, k: int = DEFAULT_K) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1 neighbours, got {k}")
        self.k = k
        self._rows: np.ndarray | None = None
        self._size = 0
        self._generations = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return self._size

    @property
    def behaviors(self) -> np.ndarray:
        """[len, d] read-only view of the archived BCs, oldest first."""
        if self._rows is None:
            return np.zeros((0, 0))
        view = self._rows[: self._size].view()
        view.flags.writeable = False
        return view

    @property
    def generations(self) -> np.ndarray:
        """int64 [len], read-only: the generation each BC was added in (for plots)."""
        view = self._generations[: self._size].view()
        view.flags.writeable = False
        return view

    def add(self, behaviors: np.ndarray, generation: int) -> None:
        """Appends BCs ``[m, d]`` (or one ``[d]``), added during ``generation``.

        Raises:
            ValueError: If the width or dtype differs from the archived BCs.
        """
        behaviors = np.asarray(behaviors)
        if behaviors.ndim == 1:
            behaviors = behaviors[None]
        if behaviors.ndim != 2:
            raise ValueError(f"behaviors must be [m, d] or [d], got shape {behaviors.shape}")
        if self._rows is None:
            self._rows = np.empty((max(16, len(behaviors)), behaviors.shape[1]), behaviors.dtype)
            self._generations = np.empty(len(self._rows), np.int64)
        if behaviors.shape[1] != self._rows.shape[1] or behaviors.dtype != self._rows.dtype:
            raise ValueError(
                f"archive holds {self._rows.dtype} BCs of width {self._rows.shape[1]}, got "
                f"{behaviors.dtype} of width {behaviors.shape[1]}; one run must keep one BC"
            )
        end = self._size + len(behaviors)
        if end > len(self._rows):
            capacity = max(end, 2 * len(self._rows))
            self._rows = np.resize(self._rows, (capacity, self._rows.shape[1]))
            self._generations = np.resize(self._generations, capacity)
        self._rows[self._size : end] = behaviors
        self._generations[self._size : end] = generation
        self._size = end

    def novelty(self, behaviors: np.ndarray, with_population: bool = False) -> np.ndarray:
        """float64 [n] novelty of ``behaviors [n, d]`` against the archive.

        Args:
            behaviors: The BCs to score.
            with_population: Also compare each BC with the other rows of ``behaviors`` (the
                current population, as Lehman & Stanley's and Such et al.'s GA-NS do).
        """
        behaviors = np.asarray(behaviors)
        if not with_population:
            return knn_novelty(behaviors, self.behaviors_like(behaviors), self.k)
        reference = np.concatenate([behaviors, self.behaviors_like(behaviors)])
        return knn_novelty(behaviors, reference, self.k, exclude_self=True)

    def behaviors_like(self, behaviors: np.ndarray) -> np.ndarray:
        """The archive as [len, d] in ``behaviors``' dtype (empty with its width if unused)."""
        if self._rows is None:
            return np.zeros((0, behaviors.shape[-1]), behaviors.dtype)
        return self.behaviors

    def state_dict(self) -> dict[str, Any]:
        """``{"behaviors": [len, d], "generations": [len]}`` copies, for a checkpoint."""
        return {
            "behaviors": np.array(self.behaviors),
            "generations": np.array(self.generations),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` exactly (same rows, dtype and generations)."""
        behaviors = np.asarray(state["behaviors"])
        self._rows, self._size = None, 0
        self._generations = np.zeros(0, np.int64)
        if behaviors.size or (behaviors.ndim == 2 and behaviors.shape[1]):
            self.add(behaviors, 0)
            self._generations[: self._size] = np.asarray(state["generations"], np.int64)
