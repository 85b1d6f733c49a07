"""A training start is planned once (``neuroevo.run.plan``): on a real start and a real resume
through the command line, every check runs exactly once, wherever it is called from."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from neuroevo.cli import train
from neuroevo.config import schema
from neuroevo.evaluation import evaluator
from neuroevo.run import checkpoints, plan, preflight, run_dir

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny_atari.yaml")

CHECKS = {
    "run directory": (run_dir.RunDir, "check"),
    "resume compatibility": (schema, "diff_incompatible"),
    "sizes": (preflight, "check_sizes"),
    "model sizes": (preflight, "check_model_sizes"),
    "one-slot probe": (plan, "_probe_sizes"),
    "threads": (evaluator, "reserve_inter_op_threads"),
    "checkpoint discovery": (checkpoints.CheckpointScan, "__init__"),
    "checkpoint loads": (checkpoints, "load_checkpoint"),
}
"""What a start checks or resolves, by the object that defines it and its name."""


def count_calls(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Counts every call of each of ``CHECKS``: the definition is replaced in its module or
    class and in every neuroevo module that imported it by name."""
    calls: Counter = Counter()
    for what, (owner, name) in CHECKS.items():
        original = getattr(owner, name)

        def counted(*args, _original=original, _what=what, **kwargs):
            calls[_what] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("neuroevo") and (
                getattr(module, name, None) is original
            ):
                monkeypatch.setattr(module, name, counted)
    return calls


def test_every_check_of_a_start_and_a_resume_runs_once(tmp_path, monkeypatch) -> None:
    run = tmp_path / "run"
    common = ["--set", f"noise.cache_dir={tmp_path}/noise", "--quiet"]
    calls = count_calls(monkeypatch)
    first = ["--config", TINY, "--run-dir", str(run), "--set", "budget.generations=1"]
    assert train.main([*first, *common]) == 0
    started = {what: 1 for what in ("run directory", "sizes", "model sizes", "one-slot probe")}
    assert calls == Counter(started, threads=1)

    calls.clear()
    assert train.main(["--resume", str(run), "--set", "budget.generations=2", *common]) == 0
    assert calls == Counter(
        started,
        threads=1,
        **{"resume compatibility": 1, "checkpoint discovery": 1, "checkpoint loads": 1},
    )
