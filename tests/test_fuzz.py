"""Hundreds of random bad calls per op family, each family in its own subprocess.

``tests/fuzz_driver.py`` does the calls. A crash (segfault, abort, bus error) ends only the
subprocess and fails its test here; every call must be refused with a message; a fixed-seed
episode played before the calls must replay identically after them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CALLS = {"atari": 400, "mujoco": 400, "maze": 400, "gym": 300, "models": 300, "evaluator": 200}


@pytest.mark.parametrize("family", list(CALLS))
def test_random_bad_calls_are_all_refused_and_change_nothing(family: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    process = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "fuzz_driver.py"), family, str(CALLS[family])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert process.returncode == 0, f"exit code {process.returncode}:\n{process.stderr[-3000:]}"
    report = json.loads(process.stdout.strip().splitlines()[-1])
    assert report["accepted"] == [], report
    assert report["rejected"] == CALLS[family]
    assert report["same_episode"]
