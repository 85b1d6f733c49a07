"""The MuJoCo suite of ``python -m benchmarks reproduce``: its recipes load with the ARS
paper's thresholds, a run trains in a child ``neuroevo.train`` that a later call resumes and
never repeats once finished, and the report reads the first test at the threshold, the median
over seeds (a seed that never gets there counting as never) and writes the JSON, the curves and
the RESULTS.md section (fake runs and a fake child: no training)."""

from __future__ import annotations

import argparse
import csv
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import reproduce
from benchmarks.reproduce import MUJOCO, Recipe, Run
from neuroevo.config.schema import load_config

ROOT = Path(__file__).resolve().parents[2]
HOPPER = next(r for r in MUJOCO if r.name == "ars_hopper")
ARS_TABLE_1 = {
    "Swimmer": 325,
    "Hopper": 3120,
    "HalfCheetah": 3430,
    "Walker2d": 4390,
    "Ant": 3580,
    "Humanoid": 6000,
}


def test_recipes_load_with_the_ars_papers_thresholds() -> None:
    assert {r.task for r in MUJOCO} == set(ARS_TABLE_1)
    for recipe in MUJOCO:
        assert recipe.threshold == ARS_TABLE_1[recipe.task]
        cfg = load_config(recipe.config, recipe.overrides)
        assert cfg.env.kind in ("mujoco", "gym") and cfg.test.policy == "elite"
        assert cfg.test.at_end and cfg.budget.hours <= recipe.target_minutes / 60
    shifted = load_config(HOPPER.config, HOPPER.overrides)
    assert shifted.env.decrease_training_rewards_by == 1.0  # Hopper's alive bonus
    plain = next(r for r in MUJOCO if r.name == "ars_hopper@no_shift")
    assert load_config(plain.config, plain.overrides).env.decrease_training_rewards_by == 0


def test_first_reaching_and_the_median_over_seeds() -> None:
    tests = [{"test": 100.0, "steps": 1.0}, {"test": 3200.0, "steps": 2.0}, {"test": 3500.0}]
    assert reproduce.first_reaching(tests, 3120)["steps"] == 2.0
    assert reproduce.first_reaching(tests, 4000) is None
    assert reproduce.median_to_threshold([1.0, None, 2.0]) == 2.0  # never counts as infinite
    assert reproduce.median_to_threshold([None, None, 2.0]) is None  # the median never got there
    assert reproduce.median_to_threshold([]) is None


def _write_run(path: Path, curve: list[tuple[float, float, float | None]], load: float) -> None:
    """A finished run directory: a metrics.csv whose rows are (steps, seconds, test mean)
    (None: no test in that generation) and its run.json."""
    path.mkdir(parents=True)
    with (path / "metrics.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["generation", "frames", "wall_time_s", "best", "test_mean"])
        for generation, (steps, seconds, test) in enumerate(curve):
            writer.writerow([generation, steps, seconds, 0.0, "" if test is None else test])
    sessions = [{"seconds": curve[-1][1] + 30, "foreign_load": load, "exit": 0}]
    (path / "run.json").write_text(json.dumps({"sessions": sessions}))


def test_report_from_finished_runs(tmp_path, monkeypatch) -> None:
    runs = [Run(HOPPER, seed, tmp_path / f"s{seed}", ()) for seed in range(3)]
    _write_run(runs[0].path, [(1e6, 60, 2000), (2e6, 120, None), (3e6, 180, 3150)], 0.1)
    _write_run(runs[1].path, [(1e6, 90, 3300), (2e6, 180, 2900)], 0.5)  # reached, then fell
    walker = Recipe("ars_walker2d", "Walker2d", 4390)
    pending = Run(walker, 0, tmp_path / "w0", ())
    monkeypatch.setattr(
        reproduce,
        "machine_info",
        lambda: {"cpu": "Test CPU", "cpu_count": 2, "tensorflow": "2.x", "time": "2026-12-07T1"},
    )
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nby hand\n")
    args = argparse.Namespace(
        runs=tmp_path, plot=tmp_path / "m.png", markdown=results, command="reproduce --suite x"
    )
    payload = reproduce.report("mujoco", [*runs, pending], args)

    hopper = payload["results"]["Hopper"]["recipes"]["ars_hopper"]
    assert hopper["pending"] == 1 and [r["seed"] for r in hopper["runs"]] == [0, 1]
    first, second = hopper["runs"]
    assert first["reached"] == {"generation": 2, "steps": 3e6, "wall_s": 180, "test": 3150}
    assert (first["final"], first["best"], first["train_s"]) == (3150, 3150, 180)
    assert second["reached"]["steps"] == 1e6 and second["final"] == 2900
    assert payload["results"]["Walker2d"]["recipes"]["ars_walker2d"]["pending"] == 1
    assert json.loads((tmp_path / "mujoco.json").read_text()) == payload
    assert (tmp_path / "m.png").stat().st_size > 0
    text = results.read_text()
    assert text.startswith("# Results\n\nby hand\n")  # the text around the section is kept
    assert (
        "| Hopper | `ars_hopper` | 3,120 | 2 of 2 (1 pending) | 2.00M | 2.2 | 3,150, 2,900 | "
        "3,150, 3,300 | 3.0M, 3, 2.0M, 3 |" in text
    )
    assert "Test CPU, 2 cores (other processes used 0.10-0.50 cores" in text
    assert "Walker2d" not in text.split("|---|")[1]  # no row for a task with no finished run
    reproduce.report("mujoco", runs, args)  # again: the section is replaced, not appended
    assert results.read_text().count("<!-- reproduce:mujoco:begin -->") == 1
    rows = reproduce.headline(payload).splitlines()  # README's, written with docs/RESULTS.md
    assert rows[2] == "| Hopper | 3,120 | `ars_hopper` | 2 of 2 | 2.00M | 2.2 |" and len(rows) == 5


def test_a_run_trains_in_a_child_then_resumes_and_records_its_sessions(
    tmp_path, monkeypatch
) -> None:
    commands: list[list[str]] = []
    exits = iter([1, 0])

    def child(command, **kwargs):
        commands.append(command)
        (tmp_path / "run").mkdir(exist_ok=True)
        (tmp_path / "run" / "config.yaml").write_text("{}")
        return subprocess.CompletedProcess(command, next(exits), "", "killed\n")

    monkeypatch.setattr(reproduce.subprocess, "run", child)
    run = Run(HOPPER, 2, tmp_path / "run", ("budget.frames=1000",))
    with pytest.raises(RuntimeError, match="run failed:\nkilled"):
        reproduce.train(run)
    assert not run.finished
    reproduce.train(run)  # the second call resumes the run the first one started
    fresh, resumed = commands
    assert fresh[fresh.index("--config") + 1] == str(HOPPER.config)
    assert fresh[fresh.index("--run-dir") + 1] == str(run.path)
    sets = [fresh[i + 1] for i, arg in enumerate(fresh) if arg == "--set"]
    assert sets == [*HOPPER.overrides, "seed=2", "budget.frames=1000"]
    assert resumed[-3:] == ["--resume", str(run.path), "--start-over"]
    record = json.loads(run.record.read_text())
    assert (record["recipe"], record["seed"], record["extra"]) == ("ars_hopper", 2, sets[-1:])
    assert [s["exit"] for s in record["sessions"]] == [1, 0]


def test_main_skips_finished_runs_and_runs_another_process_holds(tmp_path, monkeypatch) -> None:
    trained: list[str] = []
    monkeypatch.setattr(reproduce, "train", lambda run: trained.append(run.path.name))
    monkeypatch.setattr(reproduce, "report", lambda *args: None)
    suite = tmp_path / "mujoco"
    _write_run(suite / "ars_hopper-s0", [(1.0, 1.0, 1.0)], 0.0)  # finished
    with open(suite / ".ars_hopper-s1.lock", "w") as lock:  # held by another process
        fcntl.flock(lock, fcntl.LOCK_EX)
        argv = ["--suite", "mujoco", "--tasks", "Hopper", "--runs", str(tmp_path)]
        assert reproduce.main(argv) == 0
    one_seed = ("ars_hopper-no_shift-s0", "pgpe_hopper-shift-s0", "es_hopper-shift-s0")
    assert trained == ["ars_hopper-s2", *one_seed]
    with pytest.raises(SystemExit):
        reproduce.main(["--suite", "mujoco", "--tasks", "Hoper"])


def test_sigterm_ends_the_benchmark_with_its_training_child(tmp_path) -> None:
    """A benchmark stopped with ``kill`` takes its child along: an orphan would go on training
    the run unowned while a new benchmark claims it."""
    pid_file = tmp_path / "child.pid"
    child = "import os, pathlib, sys, time; pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))"
    child += "; time.sleep(600)"
    parent = (
        "import subprocess, sys\n"
        "from benchmarks.reproduce import sigterm_as_exit\n"
        "with sigterm_as_exit():\n"
        f"    subprocess.run([sys.executable, '-c', {child!r}, {str(pid_file)!r}])\n"
    )
    benchmark = subprocess.Popen([sys.executable, "-c", parent], cwd=ROOT)
    try:
        while not pid_file.is_file() or not pid_file.read_text():
            assert benchmark.poll() is None, "the benchmark ended before its child started"
            time.sleep(0.05)
        benchmark.send_signal(signal.SIGTERM)
        assert benchmark.wait(timeout=120) == 128 + signal.SIGTERM  # a hang guard only
    finally:
        benchmark.kill()
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)
    before = signal.getsignal(signal.SIGTERM)
    with reproduce.sigterm_as_exit():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_overrides_get_their_own_run_directories() -> None:
    plain = reproduce.run_dir_name(HOPPER, 0, ())
    smoke = reproduce.run_dir_name(HOPPER, 0, ("budget.frames=20000",))
    assert plain == "ars_hopper-s0" and smoke.startswith("ars_hopper-s0-") and smoke != plain
    variant = next(r for r in MUJOCO if "@" in r.name)
    assert "@" not in reproduce.run_dir_name(variant, 0, ())
