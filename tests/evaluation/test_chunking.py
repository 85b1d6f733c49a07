"""The chunk queue of the Ray backend and its simulated cluster: exact, hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.cluster_sim import simulate_generation
from neuroevo.evaluation.chunking import Chunk, ChunkPolicy, ChunkQueue


def drain(queue: ChunkQueue, evaluators: int) -> list[Chunk]:
    chunks = []
    while (chunk := queue.take(evaluators)) is not None:
        chunks.append(chunk)
    return chunks


def test_guided_chunks_shrink_and_cover_every_item_once():
    chunks = drain(ChunkQueue(100, ChunkPolicy(tail_factor=2.0)), evaluators=2)
    # ceil(remaining / 4) at each step, by hand.
    assert [c.size for c in chunks] == [25, 19, 14, 11, 8, 6, 5, 3, 3, 2, 1, 1, 1, 1]
    assert [c.start for c in chunks[1:]] == [c.stop for c in chunks[:-1]]
    assert (chunks[0].start, chunks[-1].stop) == (0, 100)


def test_chunk_sizes_respect_min_and_max():
    chunks = drain(ChunkQueue(100, ChunkPolicy(min_items=8, max_items=20)), evaluators=1)
    assert [c.size for c in chunks] == [20, 20, 20, 20, 10, 8, 2]


def test_requeued_chunk_comes_first_and_is_split_by_the_policy():
    queue = ChunkQueue(40, ChunkPolicy(min_items=4, max_items=10))
    first, second = queue.take(1), queue.take(1)
    assert (first, second) == (Chunk(0, 10), Chunk(10, 20))
    queue.requeue(first)
    assert queue.remaining == 30
    rest = drain(queue, 1)
    assert rest[0] == Chunk(0, 10)  # ceil(30 / 2) = 15, clamped to max_items
    covered = sorted(i for c in [second, *rest] for i in range(c.start, c.stop))
    assert covered == list(range(40))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_items": 0}, "min_items"),
        ({"min_items": 5, "max_items": 4}, "max_items"),
        ({"tail_factor": 0.0}, "tail_factor"),
    ],
)
def test_bad_policy_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ChunkPolicy(**kwargs)


def test_simulation_of_equal_items_is_exact():
    result = simulate_generation(
        np.ones(8), 2, policy=ChunkPolicy(min_items=1, max_items=1), prefetch=1
    )
    assert result.wall_s == 4.0
    assert result.busy_share == 1.0
    assert result.tail_s == 0.0
    assert (result.chunks, result.requeued) == (8, 0)


def test_slots_run_a_chunk_like_the_local_evaluator_refills_them():
    # One evaluator with 2 slots and one chunk of items 3, 1, 1, 1: slot A takes 3 s, slot B
    # runs the three short ones back to back, so the chunk ends at 3 s with 6 of 6 busy.
    result = simulate_generation(
        np.array([3.0, 1.0, 1.0, 1.0]), 1, slots=2, policy=ChunkPolicy(min_items=4)
    )
    assert result.wall_s == 3.0
    assert result.busy_share == 1.0


def test_a_dying_evaluator_loses_no_item():
    # Two evaluators, items of 1 s in chunks of one, one chunk in hand each. Evaluator 0 dies
    # at 2.5 s during its third item (item 4) and never returns: item 4 is redone by
    # evaluator 1, which has run 1, 3, 5 by then and runs 4, 6, 7 (ends at 6 s).
    result = simulate_generation(
        np.ones(8),
        2,
        policy=ChunkPolicy(min_items=1, max_items=1),
        prefetch=1,
        deaths={0: 2.5},
        restart_s=None,
    )
    assert result.chunks == 8
    assert result.requeued == 1
    assert result.wall_s == 6.0
    # Live slot-seconds: 2.5 (evaluator 0) + 6 (evaluator 1); busy: 8 items + 0.5 s lost.
    assert result.busy_share == pytest.approx(8.5 / 8.5)
    assert result.lost_share == pytest.approx(0.5 / 8.5)


def test_everyone_dead_is_an_error():
    with pytest.raises(RuntimeError, match="every evaluator died"):
        simulate_generation(np.ones(4), 1, deaths={0: 0.5}, restart_s=None)


def test_guided_chunks_cut_the_tail_of_fixed_large_chunks():
    rng = np.random.default_rng(0)
    item_s = rng.lognormal(0.0, 1.0, 2000)
    guided = simulate_generation(item_s, 16, slots=4)
    fixed = simulate_generation(
        item_s, 16, slots=4, policy=ChunkPolicy(min_items=125, max_items=125)
    )
    assert guided.tail_s < fixed.tail_s / 2
    assert guided.wall_s < fixed.wall_s


@pytest.mark.parametrize(("evaluators", "sigma"), [(64, 0.5), (256, 0.5), (512, 0.1)])
def test_hundreds_of_evaluators_stay_busy_with_slow_and_dying_ones(evaluators, sigma):
    """Issue 13's target (docs/DISTRIBUTED.md): 10,000 one-core episodes of lognormal length
    (median 2 s, capped at 8 s), 10% of the evaluators 1.5x slower, 2% dying once
    mid-generation and back 30 s later, 1 ms of driver time per chunk sent or received."""
    rng = np.random.default_rng(1)
    item_s = np.minimum(rng.lognormal(np.log(2.0), sigma, 10_000), 8.0)
    speed = np.where(rng.random(evaluators) < 0.1, 1.5, 1.0)
    dying = rng.choice(evaluators, evaluators // 50, replace=False)
    ideal_s = item_s.sum() / evaluators
    deaths = {
        int(w): float(t) * ideal_s for w, t in zip(dying, rng.random(dying.size), strict=True)
    }
    result = simulate_generation(
        item_s, evaluators, speed=speed, deaths=deaths, restart_s=30.0, driver_s_per_chunk=0.001
    )
    assert result.requeued >= len(deaths)
    assert result.busy_share >= 0.9
