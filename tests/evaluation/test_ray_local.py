"""A local Ray started by ``RayEvaluator(address=None)`` does not outlive its driver: after a
SIGKILL of the driver, and after a normal close, no Ray process of that driver is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
if not Path("/proc/self/stat").exists():
    pytest.skip("the watchdog reads /proc (Linux only)", allow_module_level=True)

from neuroevo.evaluation.ray.local import command_line, running

ROOT = Path(__file__).resolve().parents[2]

DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    import ray
    from neuroevo.evaluation.ray import RayEvaluator
    from neuroevo.evaluation.ray.local import ray_descendants

    evaluator = RayEvaluator(lambda: None, address=None, init_kwargs={"num_cpus": 1})

    @ray.remote
    class Probe:
        def pid(self):
            return os.getpid()

    probe = Probe.remote()  # a worker process too, not only the node's
    worker = ray.get(probe.pid.remote())
    time.sleep(2)  # the agents start a moment after ray.init returns
    print(json.dumps([sorted(ray_descendants(os.getpid())), worker]), flush=True)
    if sys.argv[1] == "close":
        evaluator.close()
        print("closed", flush=True)
    else:
        time.sleep(600)
    """
)


def start_driver(mode: str) -> tuple[subprocess.Popen, set[tuple[int, int]], int]:
    """Runs the driver until its Ray node is up; returns it, its Ray processes and the
    worker's pid."""
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    processes, worker = json.loads(driver.stdout.readline())
    return driver, {tuple(p) for p in processes}, worker


def wait_gone(processes: set[tuple[int, int]], timeout_s: float) -> set[tuple[int, int]]:
    """Waits until none of ``processes`` runs or ``timeout_s`` passed; returns those still
    running."""
    deadline = time.monotonic() + timeout_s
    while running(processes) and time.monotonic() < deadline:
        time.sleep(0.5)
    return running(processes)


@pytest.mark.slow
def test_a_sigkilled_driver_leaves_no_ray_process() -> None:
    driver, processes, worker = start_driver("kill")
    try:
        names = {executable_of(pid) for pid, _ in processes}
        assert "raylet" in names and any(n.endswith("Agent") for n in names), names
        assert worker in {pid for pid, _ in processes}
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    # The watchdog ends them within seconds. Left alone, the agents exit only after Ray's
    # hard-coded 60 s timeout for reporting the raylet's death to the (dead) GCS, so 45 s
    # tells the two apart with a wide margin for a loaded machine.
    left = wait_gone(processes, timeout_s=45)
    assert not left, [command_of(pid) for pid, _ in left]


@pytest.mark.slow
def test_a_closed_evaluator_leaves_no_ray_process() -> None:
    driver, processes, _ = start_driver("close")
    assert driver.stdout.readline() == "closed\n"
    assert not wait_gone(processes, timeout_s=45)
    driver.wait(timeout=60)
    assert driver.returncode == 0


def executable_of(pid: int) -> str:
    """The basename of what ``pid`` runs: its executable (``raylet``) or process title
    (``ray::DashboardAgent``), from its whole command line (paths can be any length)."""
    argv = command_line(pid)
    return os.path.basename(argv[0]) if argv else f"{pid} (gone)"


def command_of(pid: int) -> str:
    """The whole command line of ``pid`` (for messages)."""
    argv = command_line(pid)
    return " ".join(argv) if argv is not None else f"{pid} (gone)"


def test_a_ray_that_cannot_start_is_one_error_line(tmp_path) -> None:
    """A Ray node that cannot start (here: ``RAY_TMPDIR`` so long that its socket paths pass
    AF_UNIX's 107 bytes) ends a Ray-backed training run with one ``error:`` line naming the
    cause and the fix, exit code 2, no traceback."""
    ray_tmp = tmp_path / ("t" * max(1, 110 - len(str(tmp_path))))
    ray_tmp.mkdir()
    overrides = [
        "env.kind=gym",
        "env.id=CartPole-v1",
        "model.name=mlp",
        "algorithm.name=es",
        "algorithm.es.population_size=4",
        "budget.generations=1",
        "evaluator.backend=ray",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "neuroevo.train", "--run-dir", str(tmp_path / "run"), "--quiet"]
        + [f"--set={o}" for o in overrides],
        env=dict(os.environ, PYTHONPATH=str(ROOT), RAY_TMPDIR=str(ray_tmp)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert len(errors) == 1 and "AF_UNIX" in errors[0] and "set RAY_TMPDIR" in errors[0], errors
