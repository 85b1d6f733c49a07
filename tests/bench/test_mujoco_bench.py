"""The MuJoCo rows of ``python -m benchmarks envs``: ratio bookkeeping (no timing)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from benchmarks import envs_mujoco as bench

# Per-turn wall-clock rates. The machine's speed drifts between rounds (round 2 is fast for
# everyone), so the median of per-round ratios and the ratio of medians differ.
TURNS = {
    (bench.GYMNASIUM, 1): [1000.0, 1500.0, 1000.0],
    (bench.GYMNASIUM_NO_TIMER, 1): [1200.0, 1800.0, 1200.0],
    (bench.CPP_LOOP, 1): [2000.0, 3000.0, 2000.0],
    (bench.CPP_LOOP_PAIR, 2): [3200.0, 4800.0, 3400.0],  # 1.6, 1.6, 1.7
    (bench.BATCH, 1): [1800.0, 2700.0, 1800.0],
    (bench.BATCH, 2): [3420.0, 5130.0, 3420.0],  # 1.9 each round
    (bench.OP, 1): [1900.0, 3000.0, 2000.0],
    (bench.OP, 2): [3230.0, 4500.0, 3800.0],  # 1.7, 1.5, 1.9
}


@pytest.fixture
def measured(monkeypatch) -> None:
    def fake(task, opts, retry):
        return [
            {
                "slots": 64,
                "steps_per_s": sorted(TURNS[key])[1],
                "rates": TURNS[key],
                "steps_per_cpu_s": sorted(TURNS[key])[1] / key[1],
                "foreign_load": [0.0] * 3,
            }
            for key in bench.MEASURED
        ]

    monkeypatch.setattr(bench, "_measure_interleaved", fake)


def test_thread_scaling_is_the_median_of_per_round_ratios(measured, capsys) -> None:
    rows = bench.mujoco_rows(argparse.Namespace(mujoco_tasks=["Hopper"]))
    by_key = {(r["impl"], r["threads"]): r for r in rows}
    assert len(rows) == len(bench.MEASURED)

    op_two = by_key[bench.OP, 2]
    assert op_two["thread_scaling"] == pytest.approx(1.7)  # ratio of medians: 3800/2000 = 1.9
    assert op_two["hardware_scaling"] == pytest.approx(1.6)
    assert op_two["target"] == bench.TARGET_THREAD_SCALING and op_two["meets_target"] is False
    assert by_key[bench.BATCH, 2]["thread_scaling"] == pytest.approx(1.9)
    assert "target" not in by_key[bench.BATCH, 2]
    assert by_key[bench.CPP_LOOP_PAIR, 2]["thread_scaling"] == pytest.approx(1.6)

    op_one = by_key[bench.OP, 1]
    assert op_one["vs_gymnasium_per_cpu_s"] == pytest.approx(2000 / 1000)
    assert op_one["meets_target"] is True

    report = bench.mujoco_report(rows)
    assert [t["target"] for t in report["targets"]] == [1.7, 1.8]
    assert report["targets"][1]["hardware_scaling"] == pytest.approx(1.6)
    out = capsys.readouterr().out
    assert "C++ loop, 2 processes" in out and "NO" in out


def test_a_turn_of_two_processes_adds_their_rates() -> None:
    class FakeChild:
        """Answers every request with ``reply`` and records the requests."""

        def __init__(self, reply: str) -> None:
            self.requests: list[str] = []
            self.answer = reply

        def send(self, line: str) -> None:
            self.requests.append(line)

        def reply(self, what: str) -> str:
            return self.answer

    def child(reply: str) -> FakeChild:
        return FakeChild(reply)

    # Each reply: steps/s, steps per CPU-second, CPU-seconds used.
    group = [child("1000 1100 0.9"), child("800 1000 1.0")]
    (rate, cpu_rate), cpu = bench._run_children(group, "measuring")
    assert rate == 1800
    assert cpu == pytest.approx(1.9)
    assert cpu_rate == pytest.approx((1100 * 0.9 + 1000 * 1.0) / 1.9)
    assert all(c.requests == ["run"] for c in group)


def test_plain_cpp_loop_is_sane_and_loads_beside_the_env_ops() -> None:
    """The C++ loop baseline (library mujoco_bench) runs in a process that also has the
    production mujoco ops loaded and leaves their envs alone."""
    pytest.importorskip("mujoco")
    from neuroevo.envs.mujoco import MujocoEnv

    env = MujocoEnv("Walker2d", 1)
    env.reset([0], [3])
    before = env.observation([0]).numpy()
    total = bench.plain_cpp_loop("Walker2d", 200, seed=1)
    # Healthy reward 1 a step, forward velocity of random flailing, a small control cost.
    assert np.isfinite(total) and -200 < total < 600, total
    assert bench.plain_cpp_loop("Walker2d-v5", 50, seed=2) == bench.plain_cpp_loop(
        "Walker2d", 50, 2
    )
    assert bench.plain_cpp_loop("Walker2d", 50, seed=3) != bench.plain_cpp_loop("Walker2d", 50, 2)
    assert bench.plain_cpp_loop("Hopper", 0) == 0.0
    np.testing.assert_array_equal(env.observation([0]), before)
    assert env.frames([0]).numpy()[0] == 0


def test_replayed_episodes_match_the_evaluators_returns() -> None:
    """The e2e benchmark's replay floor steps exactly the episodes the evaluator ran: recorded
    step by step and replayed in the plain C++ loop, one after another or in lockstep, their
    returns equal the graph rollout's to the last bit (seed 0)."""
    pytest.importorskip("mujoco")
    from benchmarks.e2e_rollout import _es_population, _record_episodes
    from neuroevo.envs.mujoco import MujocoEnv
    from neuroevo.evaluation import EvalRequest, Evaluator
    from neuroevo.genomes.genome import GenomeDecoder
    from neuroevo.genomes.noise import NoiseTable
    from neuroevo.models import make_model

    env = MujocoEnv("Hopper", 6)
    model = make_model("mlp", 6, env.observation_spec, env.action_spec, hidden_sizes=(8,))
    decoder = GenomeDecoder(NoiseTable(0, size=model.num_params + 5000), model.init_scales())
    rng = np.random.default_rng(0)
    genomes = _es_population(decoder, rng, 6, 1)
    seeds = rng.integers(0, 2**62, (6, 1))
    with Evaluator(env, model, decoder.decode_batch, workers=2, rollout="graph") as evaluator:
        returns = evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=60).returns[:, 0]
    actions, lengths, recorded = _record_episodes(
        env, model, decoder.decode_batch(genomes), seeds[:, 0], 60
    )
    assert lengths.min() >= 1 and lengths.max() <= 60
    np.testing.assert_array_equal(recorded, returns)
    np.testing.assert_array_equal(
        bench.replay_cpp_loop("Hopper", seeds[:, 0], actions, lengths), returns
    )
    np.testing.assert_array_equal(
        bench.replay_cpp_loop("Hopper", seeds[:, 0], actions, lengths, lockstep=True), returns
    )
    # Other actions take another trajectory.
    assert not np.array_equal(
        bench.replay_cpp_loop("Hopper", seeds[:, 0], -actions, lengths), returns
    )


@pytest.mark.parametrize(
    ("seeds", "actions", "lengths", "message"),
    [
        (np.zeros(2), np.zeros((2, 5, 3)), [5, 5, 5], "expected seeds \\[n\\]"),
        (np.zeros(2), np.zeros((2, 5, 4)), [5, 5], "actions \\[n, max_steps, 3\\]"),
        (np.zeros(2), np.zeros((2, 5, 3)), [5, 6], "lengths\\[1\\] = 6 is outside \\[0, 5\\]"),
        (np.zeros(2), np.zeros((2, 5, 3)), [-1, 0], "lengths\\[0\\] = -1"),
    ],
)
def test_replay_rejects_mismatched_inputs(seeds, actions, lengths, message) -> None:
    pytest.importorskip("mujoco")
    import tensorflow as tf

    for lockstep in (False, True):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            bench.replay_cpp_loop("Hopper", seeds, actions, lengths, lockstep=lockstep)


def test_e2e_rounds_repeat_a_short_setup_and_keep_the_rate_of_all_its_runs(monkeypatch) -> None:
    from benchmarks import e2e_rollout

    clock = [0.0]
    monkeypatch.setattr(e2e_rollout.time, "perf_counter", lambda: clock[0])
    runs = {"short": 0, "long": 0}

    def setup(name: str, seconds: float, rates: list[float]):
        def run() -> float:
            clock[0] += seconds
            runs[name] += 1
            return rates[(runs[name] - 1) % len(rates)]

        return run

    rates = e2e_rollout._rounds(
        {"short": setup("short", 0.3, [100.0, 300.0]), "long": setup("long", 2.0, [50.0])},
        rounds=2,
        min_seconds=1.0,
    )
    # 0.3 s runs: four per round (1.2 s), rates 100, 300, 100, 300 -> all steps over all time.
    assert runs == {"short": 8, "long": 2}
    assert rates["short"] == pytest.approx([150.0, 150.0])
    assert rates["long"] == [50.0, 50.0]
    # Without a minimum every setup runs once per round.
    once = e2e_rollout._rounds({"short": setup("short", 0.3, [100.0])}, rounds=3)
    assert runs["short"] == 11 and once == {"short": [100.0] * 3}
