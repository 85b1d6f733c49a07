"""The Atari rows of ``python -m benchmarks envs``: plan and ratio bookkeeping (no timing)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from benchmarks import envs


def _args(**overrides: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    envs.add_atari_arguments(parser)
    args = parser.parse_args([])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_plan_has_every_row_the_issue_asks_for() -> None:
    plan = envs._atari_plan(_args(slots=[1, 8, 32], threads=[1, 2]))
    assert plan[:2] == [("raw ALE loop", 1, 1), ("gymnasium loop", 1, 1)]
    assert ("neuroevo op", 1, 1) in plan and ("neuroevo op", 2, 1) not in plan
    for slots in (8, 32):
        for threads in (1, 2):
            assert ("neuroevo op", threads, slots) in plan
            assert ("AtariVectorEnv", threads, slots) in plan


def test_report_computes_ratios_against_targets(capsys) -> None:
    def row(impl: str, threads: int, slots: int, rate: float) -> dict:
        return {
            "env": "pong",
            "impl": impl,
            "threads": threads,
            "slots": slots,
            "frames_per_s": rate,
            "rates": [rate],
            "frames_per_cpu_s": rate / threads,
        }

    rows = [
        row("raw ALE loop", 1, 1, 20_000.0),
        row("gymnasium loop", 1, 1, 10_000.0),
        row("neuroevo op", 1, 8, 19_000.0),
        row("neuroevo op", 2, 8, 36_000.0),
        row("AtariVectorEnv", 1, 8, 14_000.0),
        row("AtariVectorEnv", 2, 8, 40_000.0),
    ]
    report = envs.atari_report(rows)
    ratios = {(r["target_name"], r["what"]): (r["ratio"], r["ok"]) for r in report["ratios"]}
    assert ratios["op_vs_raw_per_thread", "op 1 thread (8 slots) / raw ALE loop"] == (0.95, True)
    assert ratios["op_vs_gymnasium_one_core", "op 1 thread (8 slots) / gymnasium"] == (1.9, True)
    vector_two = ratios["op_vs_vector_env", "op / AtariVectorEnv, 2 thread(s), 8 slots"]
    assert vector_two == (0.9, False)
    scaling = ratios["op_two_vs_one_thread", "op 2 / 1 threads, 8 slots"]
    assert abs(scaling[0] - 36 / 19) < 1e-9 and scaling[1]
    out = capsys.readouterr().out
    assert "AtariVectorEnv" in out and "NO" in out


def test_thread_scaling_pairs_the_rounds(capsys) -> None:
    def row(impl: str, threads: int, slots: int, rates: list[float]) -> dict:
        return {
            "env": "pong",
            "impl": impl,
            "threads": threads,
            "slots": slots,
            "frames_per_s": sorted(rates)[1],
            "rates": rates,
            "frames_per_cpu_s": sorted(rates)[1] / threads,
        }

    # Round 2 is fast for everyone: per round the op scales 1.8, 1.8, 1.6.
    rows = [
        row("raw ALE loop", 1, 1, [20_000.0, 30_000.0, 20_000.0]),
        row("gymnasium loop", 1, 1, [10_000.0, 15_000.0, 10_000.0]),
        row("neuroevo op", 1, 8, [19_000.0, 30_000.0, 20_000.0]),
        row("neuroevo op", 2, 8, [34_200.0, 54_000.0, 32_000.0]),
    ]
    ratios = {r["what"]: r["ratio"] for r in envs.atari_report(rows)["ratios"]}
    assert abs(ratios["op 2 / 1 threads, 8 slots"] - 1.8) < 1e-9  # medians alone: 1.71


RAW_LOOP_AFTER_ENV = """
from neuroevo import ops
from neuroevo.envs.atari import AtariEnv, rom_path
AtariEnv("pong", 1)
seconds = ops.load("atari_bench").neuroevo_atari_raw_loop(
    game="pong", rom_path=rom_path("pong"), frames=400
)
print("seconds", float(seconds))
"""


def test_raw_loop_loads_beside_the_env_ops_and_stays_quiet() -> None:
    """The bare ALE loop (library atari_bench) runs in a process that also has the production
    atari ops loaded, and quiets its own copy of ALE's logger (no banner per ROM load)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", RAW_LOOP_AFTER_ENV],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seconds = float(done.stdout.split("seconds")[-1])
    assert seconds > 0  # a benchmark reports the rate; no bound a busy machine breaks
    assert "Running ROM file" not in done.stdout + done.stderr
