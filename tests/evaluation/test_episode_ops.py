"""The rollout's episode bookkeeping ops (``custom_ops/rollout/episode_ops.cc``) against a numpy
reference written from their documentation, on fresh random states, and their input errors."""

import numpy as np
import pytest
import tensorflow as tf

from neuroevo.ops import load

OPS = load("rollout")


def _state(rng, slots):
    """A random worker state: some free slots (item -1), running ones with lengths, frames
    and sums."""
    counts = np.stack(
        [
            np.where(rng.random(slots) < 0.3, -1, rng.integers(0, 1000, slots)),
            rng.integers(0, 50, slots),
            rng.integers(0, 500, slots),
        ],
        axis=1,
    ).astype(np.int64)
    sums = rng.normal(size=(slots, 2)) * 10
    tally = rng.integers(0, 100, 2).astype(np.int64)
    return counts, sums, tally


def _advance_reference(
    counts, sums, tally, active, reward, terminated, truncated, frames, cap, mx, max_running
):
    counts, sums, tally = counts.copy(), sums.copy(), tally.copy()
    ended = []
    for j, s in enumerate(active):
        r = np.float64(reward[j])
        sums[s, 0] += r
        sums[s, 1] += np.sign(r)
        tally[1] += frames[j] - counts[s, 2]
        counts[s, 1] += 1
        counts[s, 2] = frames[j]
        if not (counts[s, 1] < mx and not terminated[j] and not truncated[j]):
            ended.append(j)
    tally[0] += len(active)
    ended_slots = active[ended].astype(np.int32)
    records = (
        counts[ended_slots].reshape(-1, 3),
        sums[ended_slots].reshape(-1, 2),
        np.stack([terminated[ended], truncated[ended] | ~terminated[ended]], 1).reshape(-1, 2),
    )
    counts[ended_slots, 0] = -1
    room = max(0, min(cap, max_running - int(np.sum(counts[:, 0] >= 0))))
    free = np.flatnonzero(counts[:, 0] < 0)[:room].astype(np.int32)
    return counts, sums, tally, ended_slots, *records, free


@pytest.mark.parametrize("slots", [1, 7, 64])
def test_advance_matches_the_reference(rng, slots):
    for _ in range(20):
        counts, sums, tally = _state(rng, slots)
        running = np.flatnonzero(counts[:, 0] >= 0)
        active = rng.permutation(running)[: rng.integers(0, running.size + 1)].astype(np.int32)
        k = active.size
        reward = rng.normal(size=k).astype(np.float32)
        reward[rng.random(k) < 0.2] = 0.0
        terminated = rng.random(k) < 0.2
        truncated = rng.random(k) < 0.1
        frames = counts[active, 2] + rng.integers(1, 5, k)
        max_steps = int(rng.integers(1, 60))
        cap = int(rng.integers(0, slots + 2))
        max_running = int(rng.integers(1, slots + 2))
        args = (counts, sums, tally, active, reward, terminated, truncated, frames)
        want = _advance_reference(*args, cap, max_steps, max_running)
        got = OPS.neuroevo_episode_advance(*args, max_steps, cap, max_running)
        assert len(got) == len(want)
        for name, a, b in zip(
            ["counts", "sums", "tally", "ended", "ended_counts", "ended_sums", "flags", "free"],
            want,
            got,
            strict=True,
        ):
            b = b.numpy()
            assert a.dtype == b.dtype and a.shape == b.shape, name
            assert np.array_equal(a, b), (name, a, b)


def test_advance_sums_rewards_in_float64_and_signs_like_tf(rng):
    # Returns accumulate float64(float32 reward) in step order; NaN propagates to the sign
    # return as tf.sign does, and both zeros have sign 0.
    counts = np.array([[3, 0, 0]], np.int64)
    sums = np.zeros((1, 2))
    tally = np.zeros(2, np.int64)
    total, signs = 0.0, 0.0
    for reward in [np.float32(0.1), np.float32(-0.0), np.float32(1e-8), np.float32(-2.5)]:
        out = OPS.neuroevo_episode_advance(
            counts, sums, tally, [0], [reward], [False], [False], [counts[0, 2] + 1], 100, 0, 1
        )
        counts, sums, tally = out[0].numpy(), out[1].numpy(), out[2].numpy()
        total += np.float64(reward)
        signs += tf.sign(tf.constant(np.float64(reward))).numpy()
        assert sums[0, 0] == total and sums[0, 1] == signs
    out = OPS.neuroevo_episode_advance(
        counts, sums, tally, [0], [np.nan], [False], [False], [counts[0, 2] + 1], 100, 0, 1
    )
    assert np.isnan(out[1].numpy()).all()


@pytest.mark.parametrize("slots", [1, 9, 64])
def test_start_matches_the_reference(rng, slots):
    for _ in range(20):
        counts, sums, tally = _state(rng, slots)
        free = np.flatnonzero(counts[:, 0] < 0)
        pos = rng.permutation(free)[: rng.integers(0, free.size + 1)].astype(np.int32)
        items = rng.integers(0, 10_000, pos.size).astype(np.int64)
        frames = rng.integers(0, 30, pos.size).astype(np.int64)
        want_counts, want_sums, want_tally = counts.copy(), sums.copy(), tally.copy()
        want_counts[pos] = np.stack([items, np.zeros_like(items), frames], 1)
        want_sums[pos] = 0.0
        want_tally[1] += frames.sum()
        running = np.flatnonzero(want_counts[:, 0] >= 0).astype(np.int32)
        got = OPS.neuroevo_episode_start(counts, sums, tally, pos, items, frames)
        for a, b in zip([want_counts, want_sums, want_tally, running], got, strict=True):
            b = b.numpy()
            assert a.dtype == b.dtype and np.array_equal(a, b), (a, b)


def test_bad_inputs_are_invalid_argument_errors():
    counts = np.array([[0, 1, 2], [-1, 0, 0]], np.int64)
    sums = np.zeros((2, 2))
    tally = np.zeros(2, np.int64)
    f, t = [False], [True]

    def advance(**changes):
        args = dict(
            counts=counts,
            sums=sums,
            tally=tally,
            active=[0],
            reward=[1.0],
            terminated=f,
            truncated=f,
            frames=[3],
            max_steps=10,
            refill_cap=2,
            max_running=2,
        )
        args.update(changes)
        return OPS.neuroevo_episode_advance(**args)

    advance()  # the valid call
    cases = [
        ({"active": [2]}, "outside the worker's slots"),
        ({"active": [1]}, "free slot"),
        (
            {
                "active": [0, 0],
                "reward": [1.0, 1.0],
                "terminated": f * 2,
                "truncated": t * 2,
                "frames": [3, 3],
            },
            "listed twice",
        ),
        ({"reward": [1.0, 2.0]}, "reward must be a vector of 1"),
        ({"frames": [[3]]}, "frames must be a vector"),
        ({"max_steps": 0}, "max_steps must be >= 1"),
        ({"refill_cap": -1}, "refill_cap must be >= 0"),
        ({"max_running": 0}, "max_running must be >= 1"),
        ({"max_steps": [10]}, "max_steps must be a scalar"),
        ({"counts": np.zeros((2, 2), np.int64)}, "counts must be int64 \\[slots, 3\\]"),
        ({"sums": np.zeros((3, 2))}, "sums must be float64 \\[slots, 2\\]"),
        ({"tally": np.zeros(3, np.int64)}, "tally must be int64 \\[2\\]"),
    ]
    for changes, message in cases:
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
            advance(**changes)
    # The kernel's own checks, past graph-time shape inference: shapes unknown when traced.
    spec = tf.TensorSpec(None, tf.int32)
    traced = tf.function(
        lambda active: OPS.neuroevo_episode_advance(
            counts, sums, tally, active, [1.0], f, f, [3], 10, 2, 2
        ),
        input_signature=[spec],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="reward must be a vector of 2"):
        traced(np.array([0, 1], np.int32))

    def start(slots, items, frames):
        return OPS.neuroevo_episode_start(counts, sums, tally, slots, items, frames)

    start([1], [5], [0])  # the valid call
    for args, message in [
        (([0], [5], [0]), "still runs item 0"),
        (([1], [-5], [0]), "items\\[0\\] = -5 must be >= 0"),
        (([4], [5], [0]), "outside the worker's slots"),
        (([1, 1], [5, 6], [0, 0]), "listed twice"),
    ]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            start(*args)
