"""Run directories written by an earlier neuroevo (tests/data/old_runs/, recorded by
tests/old_runs.py on main a09fe15) resume with this code and continue exactly as the run
would have without stopping."""

from __future__ import annotations

import json
import shutil

import pytest
from old_runs import CASES, FINISHED, OLD_RUNS
from run_helpers import search_rows

from neuroevo.cli.train import main


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_old_run_directory_resumes_exactly(case, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(OLD_RUNS / case / "run", run_dir)
    args = ["--resume", str(run_dir), "--quiet", "--set", f"budget.generations={FINISHED}"]
    assert main(args) == 0
    expected = json.loads((OLD_RUNS / case / "expected.json").read_text())
    assert search_rows(run_dir) == expected
