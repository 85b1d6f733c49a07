"""Hundreds of random bad calls per op family, and an empty index vector for every op that
takes one, each family in its own subprocess.

``tests/fuzz_driver.py`` does the calls. A crash (segfault, abort, bus error) ends only the
subprocess and fails its test here; every bad call must be refused with a message; a fixed-seed
episode played before the calls must replay identically after them. An empty index vector is a
valid call: it must give outputs shaped like a one-slot call's with 0 rows and change nothing.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CALLS = {"atari": 400, "mujoco": 400, "maze": 400, "gym": 300, "models": 300, "evaluator": 200}


# Every op taking slot indices, per family: the Python API and the raw ops (``raw_*``).
# ``test_the_empty_index_cases_cover_every_index_op`` checks this list against the driver's
# cases and the driver's cases against the op libraries.
ENV_CASES = ["reset", "step", "observation", "frames", "behavior"]
EMPTY_CASES = {
    "atari": [
        *ENV_CASES,
        *("ram", "lives", "screen", "screen_rgb", "uber_observation"),
        *("raw_atari_reset", "raw_atari_step", "raw_atari_frames", "raw_atari_observation"),
        *("raw_atari_observation_float", "raw_atari_ram", "raw_atari_lives"),
        *("raw_atari_screen", "raw_atari_screen_rgb"),
    ],
    "mujoco": [
        *ENV_CASES,
        *("flags", "set_state", "raw_mujoco_reset", "raw_mujoco_step", "raw_mujoco_frames"),
        *("raw_mujoco_flags", "raw_mujoco_position", "raw_mujoco_observation"),
        "raw_mujoco_set_state",
    ],
    "maze": [
        *ENV_CASES,
        *("flags", "position", "state", "screen", "screen_rgb", "raw_maze_reset"),
        *("raw_maze_step", "raw_maze_frames", "raw_maze_flags", "raw_maze_position"),
        *("raw_maze_observation", "raw_maze_state"),
    ],
    "gym": [*ENV_CASES, "flags", "continuous_step", "continuous_observation"],
    "models": [
        *(
            f"{model}_{op}"
            for model in ("mlp", "mlp_bfloat16", "nature_small")
            for op in ("forward", "act", "read", "load")
        ),
        *("raw_resource_indexed_matmul", "raw_resource_indexed_matmul_fused"),
        *("raw_resource_indexed_matmul_bfloat16", "raw_resource_indexed_matmul_per_slot_rows"),
        *("raw_resource_indexed_conv2d", "raw_resource_indexed_conv2d_uint8_fused"),
        *("raw_resource_indexed_conv2d_per_slot_rows", "raw_indexed_matmul"),
    ],
}


def run_driver(*args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "fuzz_driver.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def exit_reason(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


@functools.cache
def empty_index_report(family: str) -> dict:
    """The driver's empty-index results for ``family``: ``{"cases": [...], "uncovered_ops":
    [...], "results": {case: "ok" or what failed}}``. A case that crashes the driver is
    recorded with the signal and the driver is rerun from the case after it."""
    report: dict = {"cases": None, "uncovered_ops": None, "results": {}}
    start = 0
    while True:
        process = run_driver("empty", family, str(start))
        begun = None
        for line in process.stdout.splitlines():
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "cases" in record:
                report["cases"] = record["cases"]
                report["uncovered_ops"] = record["uncovered_ops"]
            elif "begin" in record:
                begun = record["begin"]
            else:
                report["results"][record["case"]] = record["result"]
                begun = None
        if process.returncode == 0:
            return report
        failure = f"{exit_reason(process.returncode)}:\n{process.stderr[-2000:]}"
        if begun is None or report["cases"] is None:  # died while setting up
            for case in EMPTY_CASES[family]:
                report["results"].setdefault(case, failure)
            return report
        report["results"][begun] = failure
        start = report["cases"].index(begun) + 1


@pytest.mark.parametrize(
    ("family", "case"), [(family, case) for family, cases in EMPTY_CASES.items() for case in cases]
)
def test_an_empty_index_vector_gives_empty_outputs_and_changes_nothing(
    family: str, case: str
) -> None:
    results = empty_index_report(family)["results"]
    assert case in results, f"the driver has no case {case!r} for {family}"
    assert results[case] == "ok", results[case]


@pytest.mark.parametrize("family", list(EMPTY_CASES))
def test_the_empty_index_cases_cover_every_index_op(family: str) -> None:
    report = empty_index_report(family)
    assert report["uncovered_ops"] == [], "index-taking ops without an empty-index case"
    assert sorted(report["cases"]) == sorted(EMPTY_CASES[family])


@pytest.mark.parametrize("family", list(CALLS))
def test_random_bad_calls_are_all_refused_and_change_nothing(family: str) -> None:
    process = run_driver(family, str(CALLS[family]))
    assert process.returncode == 0, f"{exit_reason(process.returncode)}:\n{process.stderr[-3000:]}"
    report = json.loads(process.stdout.strip().splitlines()[-1])
    assert report["accepted"] == [], report
    assert report["rejected"] == CALLS[family]
    assert report["same_episode"]
