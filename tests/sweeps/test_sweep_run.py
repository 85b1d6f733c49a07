"""Sweeps on a local Ray: ``ne.sweep`` (its doctest) leaves the process as it found it; PBT
exploits a better trial through the library's resume and records the lineage; a failing trial
is recorded with its reason; a sweep killed with SIGKILL resumes, finishing the unfinished
trials exactly and leaving the finished ones untouched."""

from __future__ import annotations

import csv
import doctest
import faulthandler
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from run_helpers import SMALL_CARTPOLE, search_rows

pytest.importorskip("ray.tune")

import neuroevo as ne
from neuroevo.cli import plot
from neuroevo.evaluation.ray.local import RAY_SESSION_ENVIRON, ray_descendants, running
from neuroevo.sweeps import api
from neuroevo.sweeps.results import read_lineage, read_timeline

REPO = Path(__file__).resolve().parents[2]


def process_state() -> dict[str, object]:
    """What a sweep must put back: signal handlers, environment (but Ray's session settings,
    which stay by design: ``RAY_SESSION_ENVIRON``), ``faulthandler``."""
    handlers = {
        int(s): signal.getsignal(s)
        for s in signal.valid_signals()
        if s not in (signal.SIGKILL, signal.SIGSTOP)
    }
    env = {k: v for k, v in os.environ.items() if k not in RAY_SESSION_ENVIRON}
    return {"handlers": handlers, "env": env, "faults": faulthandler.is_enabled()}


def test_ne_sweep_runs_its_doctest_and_leaves_the_process_as_found(tmp_path: Path) -> None:
    import ray  # its import sets variables of its own, once

    del ray
    before = process_state()
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(api.sweep, "sweep", globs={"tmp": tmp_path}):
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert attempted >= 4 and failed == 0
    assert process_state() == before
    rows = list(csv.DictReader((tmp_path / "sweep" / "results.csv").open()))
    assert [row["status"] for row in rows] == ["finished", "finished"]
    run = tmp_path / "sweep" / "trials" / "trial-001"
    assert {"config.yaml", "metrics.csv", "elite.npz", "checkpoints"} <= {
        p.name for p in run.iterdir()
    }
    # The timeline: one row per generation of each trial, its env steps as in metrics.csv.
    timeline = read_timeline(tmp_path / "sweep")
    assert sorted(timeline) == ["trial-000", "trial-001"]
    for name, points in timeline.items():
        metrics_file = tmp_path / "sweep" / "trials" / name / "metrics.csv"
        metrics = list(csv.DictReader(metrics_file.open()))
        assert [frames for _, frames in points] == [float(row["frames"]) for row in metrics]
        assert [when for when, _ in points] == sorted(when for when, _ in points)


def test_pbt_exploits_the_better_trial_and_records_the_lineage(tmp_path: Path) -> None:
    """Episodes cut at 5 steps always score below episodes of 20 (CartPole gives 1 a step,
    and a random policy lasts more than 5), so trial-000 is PBT's bottom trial."""
    small = {**SMALL_CARTPOLE, "budget.generations": 6, "evaluator.workers": None}
    result = ne.sweep(
        {},
        tmp_path / "pbt",
        overrides=small,
        grid={"env.max_episode_steps": [5, 20]},
        scheduler="pbt",
        perturbation_interval=2,
        trials_in_parallel=2,
    )
    assert [row["status"] for row in result.results] == ["finished", "finished"]
    lineage = read_lineage(tmp_path / "pbt")
    assert lineage and {row["trial"] for row in lineage} == {"trial-000"}
    assert {row["source"] for row in lineage} == {"trial-001"}
    assert result.results[0]["exploits"] == len(lineage)
    trials = tmp_path / "pbt" / "trials"
    last = lineage[-1]
    generation = last["generation"]
    assert generation in (2, 4, 6)  # synchronous PBT also perturbs at the budget
    source_rows = search_rows(trials / "trial-001")
    assert last["frames"] == int(source_rows[generation - 1]["frames"])
    skipped = sum(row["frames"] - row["own_frames"] for row in lineage)
    assert result.results[0]["frames_run"] == result.results[0]["frames"] - skipped
    # The exploit copied the source's run up to its checkpoint, then continued it.
    copied = search_rows(trials / "trial-000")
    assert copied[:generation] == search_rows(trials / "trial-001")[:generation]
    assert len(copied) == 6
    config = yaml.safe_load((trials / "trial-000" / "config.yaml").read_text())
    assert config["env"]["max_episode_steps"] == last["overrides"]["env.max_episode_steps"]
    if importlib.util.find_spec("matplotlib") is not None:
        assert plot.main([str(tmp_path / "pbt"), "-o", str(tmp_path / "pbt.png")]) == 0
        assert (tmp_path / "pbt.png").stat().st_size > 0


def test_a_killed_sweep_resumes_and_a_failing_trial_is_recorded(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    small = {**SMALL_CARTPOLE, "budget.generations": 30}  # long enough to kill mid-way
    base = tmp_path / "base.yaml"
    base.write_text("budget: {generations: 30}\n")
    command = [
        sys.executable,
        "-m",
        "neuroevo.sweep",
        "--config",
        str(base),
        *(
            f"--set={k}={yaml.safe_dump(v, default_flow_style=True).strip()}"
            for k, v in small.items()
        ),
        "--grid",
        "env.id=CartPole-v1,CartPole-v1,NoSuchEnv-v0",  # trial-000 is trial-001 never stopped
        "--trials-in-parallel",
        "1",
        "--quiet",
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(
        [*command, "--sweep-dir", str(sweep_dir)], cwd=REPO, env=env, stderr=subprocess.PIPE
    )
    finished = sweep_dir / "status" / "trial-000.json"
    second = sweep_dir / "trials" / "trial-001" / "checkpoints"
    deadline = time.monotonic() + 600
    while not (finished.is_file() and any(second.glob("ckpt-*"))):
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "trial-001 saved no checkpoint"
        time.sleep(0.05)
    ray_processes = ray_descendants(process.pid)
    process.send_signal(signal.SIGKILL)
    process.wait()
    untouched = snapshot(sweep_dir / "trials" / "trial-000")
    deadline = time.monotonic() + 60  # the watchdog ends the killed sweep's Ray
    while running(ray_processes) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not running(ray_processes)

    resumed = subprocess.run(
        [sys.executable, "-m", "neuroevo.sweep", "--resume", str(sweep_dir), "--quiet"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert snapshot(sweep_dir / "trials" / "trial-000") == untouched
    rows = list(csv.DictReader((sweep_dir / "results.csv").open()))
    assert [row["status"] for row in rows] == ["finished", "finished", "failed"]
    assert [row["generations"] for row in rows[:2]] == ["30", "30"]
    assert "NoSuchEnv" in rows[2]["reason"] and "\n" not in rows[2]["reason"]
    # The resumed trial equals the same run never stopped.
    trials = sweep_dir / "trials"
    assert search_rows(trials / "trial-001") == search_rows(trials / "trial-000")


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``directory``: its bytes and modification time."""
    return {
        str(path.relative_to(directory)): (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }
