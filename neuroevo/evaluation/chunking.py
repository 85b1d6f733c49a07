"""How a generation's episodes are cut into chunks for a cluster.

A generation is ``N = genomes * episodes_per_genome`` items, item ``k`` being episode
``k % episodes_per_genome`` of genome ``k // episodes_per_genome`` (the local evaluator's
genome-major order). ``ChunkQueue`` hands out contiguous item ranges to whichever evaluator
asks, largest first and smaller as the generation runs out (guided self-scheduling: a chunk is
the remaining work over ``tail_factor`` times the number of evaluators), so early chunks
amortise the per-chunk cost and the last ones are small enough that no evaluator finishes
long after the others. A chunk lost with its evaluator goes back to the front of the queue.

``benchmarks/cluster_sim.py`` drives the same queue against stand-in evaluators on a
simulated clock.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque

__all__ = ["Chunk", "ChunkPolicy", "ChunkQueue"]


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Items ``start .. stop - 1`` of a generation."""

    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


@dataclasses.dataclass(frozen=True)
class ChunkPolicy:
    """Chunk sizes: ``ceil(remaining / (tail_factor * evaluators))`` clamped to
    ``[min_items, max_items]`` (and never more than what is left).

    Attributes:
        min_items: smallest chunk; an evaluator's slot count keeps all its slots busy.
        max_items: largest chunk; bounds the work redone when an evaluator dies.
        tail_factor: larger values make smaller chunks (shorter tail, more messages).

    Raises:
        ValueError: ``min_items < 1``, ``max_items < min_items`` or ``tail_factor <= 0``.
    """

    min_items: int = 1
    max_items: int = 4096
    tail_factor: float = 2.0

    def __post_init__(self) -> None:
        if self.min_items < 1:
            raise ValueError(f"min_items must be >= 1, got {self.min_items}")
        if self.max_items < self.min_items:
            raise ValueError(
                f"max_items ({self.max_items}) must be >= min_items ({self.min_items})"
            )
        if self.tail_factor <= 0:
            raise ValueError(f"tail_factor must be > 0, got {self.tail_factor}")

    def size(self, remaining: int, evaluators: int) -> int:
        """Items of the next chunk when ``remaining`` are unassigned and ``evaluators`` run."""
        guided = math.ceil(remaining / (self.tail_factor * max(evaluators, 1)))
        return min(max(guided, self.min_items), self.max_items, remaining)


class ChunkQueue:
    """The unassigned items of one generation, handed out as chunks.

    Args:
        num_items: items of the generation.
        policy: chunk sizes.
    """

    def __init__(self, num_items: int, policy: ChunkPolicy):
        if num_items < 0:
            raise ValueError(f"num_items must be >= 0, got {num_items}")
        self._policy = policy
        self._ranges: deque[Chunk] = deque([Chunk(0, num_items)] if num_items else [])
        self.remaining = num_items

    def take(self, evaluators: int) -> Chunk | None:
        """The next chunk, or None when empty.

        Args:
            evaluators: chunks held at once across the cluster (evaluators times the chunks
                each keeps in hand), over which the remaining work is spread.
        """
        if not self._ranges:
            return None
        first = self._ranges.popleft()
        size = min(self._policy.size(self.remaining, evaluators), first.size)
        if size < first.size:
            self._ranges.appendleft(Chunk(first.start + size, first.stop))
        self.remaining -= size
        return Chunk(first.start, first.start + size)

    def requeue(self, chunk: Chunk) -> None:
        """Puts back a chunk whose evaluator died; it is handed out before anything else."""
        self._ranges.appendleft(chunk)
        self.remaining += chunk.size
