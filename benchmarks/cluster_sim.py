"""Stand-ins for a cluster, for benchmarks and tests: a generation's chunking on a simulated
clock, and the bytes a generation puts on the wire, neither running an episode.

``simulate_generation`` drives the product's ``ChunkQueue`` against stand-in evaluators on a
simulated clock (no Ray, no emulator): each item takes a given time, evaluators may be slow or
die, and the driver spends a fixed time per chunk. It is deterministic, so tests can check the
chunking and tail logic exactly, and it answers how busy a cluster of hundreds of evaluators
stays. ``wire_bytes`` pickles a generation's chunk tasks and results as the Ray backend does.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import pickle
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from neuroevo.evaluation.chunking import Chunk, ChunkPolicy, ChunkQueue
from neuroevo.evaluation.ray.wire import ChunkResult, chunk_task
from neuroevo.evaluation.results import TIME_KINDS, EpisodeTable
from neuroevo.genomes.genome import ESGenome

__all__ = ["SimulatedGeneration", "simulate_generation", "wire_bytes"]


@dataclasses.dataclass(frozen=True)
class SimulatedGeneration:
    """What ``simulate_generation`` measured.

    Attributes:
        wall_s: from the first submission to the last result reaching the driver.
        busy_share: slot-seconds spent running episodes (including work lost with a dead
            evaluator) over slot-seconds of live evaluators during ``wall_s``.
        lost_share: the part of the slot-seconds spent on work lost with dead evaluators.
        tail_s: from the moment the first evaluator ran out of work (queue empty, nothing
            left in hand) to the end of the generation.
        chunks: chunks completed.
        requeued: chunks re-queued after their evaluator died.
        driver_busy_share: the driver's serial time (per chunk sent and received) over
            ``wall_s``.
    """

    wall_s: float
    busy_share: float
    lost_share: float
    tail_s: float
    chunks: int
    requeued: int
    driver_busy_share: float


def _chunk_schedule(durations: np.ndarray, slots: int, start: float) -> np.ndarray:
    """``(start, end)`` per item when the items run in order on ``slots`` slots, each taken by
    the first free slot (as the local evaluator refills its slots); float64 ``[m, 2]``."""
    free = [start] * slots
    times = np.empty((len(durations), 2))
    for i, duration in enumerate(durations.tolist()):
        begin = heapq.heappop(free)
        times[i] = begin, begin + duration
        heapq.heappush(free, begin + duration)
    return times


def simulate_generation(
    item_s: np.ndarray,
    evaluators: int,
    *,
    slots: int = 1,
    policy: ChunkPolicy | None = None,
    prefetch: int = 2,
    speed: Sequence[float] | None = None,
    deaths: dict[int, float] | None = None,
    restart_s: float | None = 5.0,
    driver_s_per_chunk: float = 0.0,
    chunk_overhead_s: float = 0.0,
) -> SimulatedGeneration:
    """Runs one generation on a simulated clock, with the driver logic of ``RayEvaluator``.

    The driver keeps ``prefetch`` chunks outstanding per evaluator; an evaluator runs its
    chunks one after the other, each on its ``slots`` slots, and idles between chunks only when
    it has none in hand. Every chunk the driver sends or receives costs it
    ``driver_s_per_chunk`` of serial time.

    Args:
        item_s: float64 ``[N]``, seconds each item (episode) takes on a speed-1 slot.
        evaluators: stand-in evaluators at the start.
        slots: slots per evaluator.
        policy: chunk sizes (default ``ChunkPolicy(min_items=slots)``).
        prefetch: chunks outstanding per evaluator.
        speed: per evaluator, the factor its items take longer (1 normal, 3 a slow node).
        deaths: evaluator -> time it dies; its unfinished chunks go back to the queue.
        restart_s: seconds until a dead evaluator is back (empty-handed), or None for never.
        driver_s_per_chunk: the driver's serial cost per chunk sent and per result received.
        chunk_overhead_s: an evaluator's fixed cost per chunk (call, setup).

    Raises:
        RuntimeError: every evaluator died for good with items left.
    """
    item_s = np.asarray(item_s, np.float64)
    policy = policy or ChunkPolicy(min_items=slots)
    speed = np.ones(evaluators) if speed is None else np.asarray(speed, np.float64)
    deaths = dict(deaths or {})
    queue = ChunkQueue(item_s.size, policy)
    hand: list[deque[Chunk]] = [deque() for _ in range(evaluators)]  # sent, not started
    running: list[tuple[Chunk, np.ndarray] | None] = [None] * evaluators
    alive = [True] * evaluators
    alive_since = [0.0] * evaluators
    alive_s = 0.0
    events: list[tuple[float, int, str, int]] = []  # (time, order, kind, evaluator)
    order = 0
    driver_free = busy = lost = 0.0
    chunks = requeued = 0
    first_idle: float | None = None
    end = 0.0

    def push(time: float, kind: str, who: int) -> None:
        nonlocal order
        heapq.heappush(events, (time, order, kind, who))
        order += 1

    def start_next(who: int, now: float) -> None:
        if running[who] is None and hand[who]:
            chunk = hand[who].popleft()
            begin = now + chunk_overhead_s
            times = _chunk_schedule(item_s[chunk.start : chunk.stop] * speed[who], slots, begin)
            running[who] = (chunk, times)
            push(float(times[:, 1].max()), "done", who)

    def top_up(now: float) -> float:
        nonlocal driver_free, first_idle
        consumers = sum(alive) * prefetch  # chunks held at once, in hand or running
        for who in range(evaluators):
            while alive[who] and len(hand[who]) + (running[who] is not None) < prefetch:
                chunk = queue.take(consumers)
                if chunk is None:
                    break
                driver_free = max(driver_free, now) + driver_s_per_chunk
                hand[who].append(chunk)
                start_next(who, driver_free)
            if alive[who] and running[who] is None and not hand[who] and first_idle is None:
                first_idle = now
        return driver_free

    for who, when in deaths.items():
        push(when, "death", who)
    top_up(0.0)
    while events and (queue.remaining or any(running) or any(hand)):
        now, _, kind, who = heapq.heappop(events)
        if kind == "done":
            if running[who] is None or float(running[who][1][:, 1].max()) != now:
                continue  # a completion from before this evaluator died
            chunk, times = running[who]
            running[who] = None
            busy += float(np.sum(times[:, 1] - times[:, 0]))
            chunks += 1
            driver_free = max(driver_free, now) + driver_s_per_chunk
            end = driver_free
            start_next(who, now)
            top_up(driver_free)
        elif kind == "death" and alive[who]:
            alive[who] = False
            alive_s += now - alive_since[who]
            lost_chunks = list(hand[who])
            if running[who] is not None:
                chunk, times = running[who]
                work = float(np.sum(np.clip(np.minimum(times[:, 1], now) - times[:, 0], 0, None)))
                busy += work
                lost += work
                lost_chunks.insert(0, chunk)
            running[who] = None
            hand[who].clear()
            for chunk in reversed(lost_chunks):
                queue.requeue(chunk)
            requeued += len(lost_chunks)
            if restart_s is not None:
                push(now + restart_s, "restart", who)
            top_up(now)
        elif kind == "restart":
            alive[who] = True
            alive_since[who] = now
            top_up(now)
    if queue.remaining or any(hand):
        raise RuntimeError(f"every evaluator died with {queue.remaining} items left")
    alive_s += sum(end - alive_since[w] for w in range(evaluators) if alive[w])
    capacity = alive_s * slots
    return SimulatedGeneration(
        wall_s=end,
        busy_share=busy / capacity if capacity else 0.0,
        lost_share=lost / capacity if capacity else 0.0,
        tail_s=end - (first_idle if first_idle is not None else end),
        chunks=chunks,
        requeued=requeued,
        driver_busy_share=(2 * chunks + requeued) * driver_s_per_chunk / end if end else 0.0,
    )


def wire_bytes(
    genomes: Sequence[Any],
    episodes_per_genome: int,
    chunks: int,
    *,
    nodes: int = 1,
    num_params: int = 0,
    behavior_bytes: int = 0,
) -> dict[str, int]:
    """Bytes one generation puts on the wire, computed without running episodes: the genomes
    cut into ``chunks`` equal chunks, fake per-episode results of the right dtypes, and (ES)
    one float32 centre of ``num_params`` per node.

    Returns:
        ``{"sent": ..., "received": ..., "shared": ..., "total": ...}``.
    """
    n = len(genomes) * episodes_per_genome
    seeds = np.arange(n, dtype=np.int64)
    bounds = np.linspace(0, n, chunks + 1).round().astype(int)
    sent = received = 0
    for start, stop in itertools.pairwise(bounds.tolist()):
        if stop == start:
            continue
        task = chunk_task(Chunk(start, stop), genomes, episodes_per_genome, seeds, None, None)
        sent += len(pickle.dumps(task, protocol=5))
        m = stop - start
        episodes = EpisodeTable(m, 1)
        if behavior_bytes:
            zeros = np.zeros(m, np.int64)
            episodes.record(zeros, zeros, behavior=np.zeros((m, behavior_bytes), np.uint8))
        result = ChunkResult(
            episodes=episodes,
            wall_s=0.0,
            seconds=dict.fromkeys(TIME_KINDS, 0.0),
            calls=0,
            steps=0,
            total_frames=0,
        )
        received += len(pickle.dumps(result, protocol=5))
    vectors = {i for g in genomes if isinstance(g, ESGenome) for i in g.vector_ids}
    shared = 4 * num_params * nodes * len(vectors)
    return {"sent": sent, "received": received, "shared": shared, "total": sent + received + shared}
