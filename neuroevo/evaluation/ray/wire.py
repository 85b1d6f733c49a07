"""The wire format between the Ray driver and its actors: what one chunk sends and returns.

A chunk's genomes travel as seed chains (``pack_genomes``; ES: centre id, noise index, sign,
sigma), never as weights; its episodes come back as an ``EpisodeTable`` plus timing. Both are
pickled by the sender (protocol 5), so their size is what the network carries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from neuroevo.evaluation.chunking import Chunk
from neuroevo.evaluation.results import EpisodeTable
from neuroevo.genomes.genome import ESGenome, GAGenome, pack_genomes, unpack_genomes

__all__ = ["ChunkResult", "ChunkTask", "chunk_task", "pack", "unpack"]


@dataclasses.dataclass(frozen=True)
class ChunkTask:
    """Items ``start .. stop - 1`` of a generation; genome ``first_genome + k`` is
    ``genomes[k]`` (packed with ``pack_genomes`` when they are GA or ES genomes)."""

    start: int
    stop: int
    episodes_per_genome: int
    first_genome: int
    genomes: dict[str, np.ndarray] | list[Any]
    seeds: np.ndarray  # int64 [m]
    sample_obs: np.ndarray | None  # bool [m]
    max_steps: int | None
    action_noise_std: float = 0.0


@dataclasses.dataclass(frozen=True)
class ChunkResult:
    """The episodes of one chunk (a ``[m, 1]`` table, cells chunk-relative) and where its time
    went."""

    episodes: EpisodeTable
    wall_s: float
    seconds: dict[str, float]
    calls: int
    steps: int
    total_frames: int


def pack(genomes: Sequence[Any]) -> dict[str, np.ndarray] | list[Any]:
    kinds = {type(g) for g in genomes}
    if kinds in ({GAGenome}, {ESGenome}):
        return pack_genomes(genomes)
    return list(genomes)


def unpack(packed: dict[str, np.ndarray] | list[Any]) -> Sequence[Any]:
    return unpack_genomes(packed) if isinstance(packed, dict) else packed


def chunk_task(
    chunk: Chunk,
    genomes: Sequence[Any],
    episodes: int,
    seeds: np.ndarray,
    sample_obs: np.ndarray | None,
    max_steps: int | None,
    action_noise_std: float = 0.0,
) -> ChunkTask:
    first, last = chunk.start // episodes, (chunk.stop - 1) // episodes
    return ChunkTask(
        start=chunk.start,
        stop=chunk.stop,
        episodes_per_genome=episodes,
        first_genome=first,
        genomes=pack(genomes[first : last + 1]),
        seeds=seeds[chunk.start : chunk.stop],
        sample_obs=None if sample_obs is None else sample_obs[chunk.start : chunk.stop],
        max_steps=max_steps,
        action_noise_std=action_noise_std,
    )
