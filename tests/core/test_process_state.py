"""Library calls leave the process as they found it: after ``ne.train``, ``ne.optimize`` and a
Ray-backed evaluation, the signal handlers, environment variables, working directory,
``faulthandler``, Python threads and TensorFlow's thread settings are those from before, and
a Ctrl-C (``_thread.interrupt_main``) still raises ``KeyboardInterrupt`` in a notebook.

No library call changes SIGINT: a suite whose Ctrl-C test failed had been started in the
background, which starts Python with SIGINT ignored (the ``ctrl_c`` fixture of
``conftest.py`` installs Python's handler for such tests)."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from run_helpers import SMALL_CARTPOLE

import neuroevo as ne
from neuroevo.evaluation.ray.local import RAY_SESSION_ENVIRON

ROOT = Path(__file__).resolve().parents[2]


def process_state() -> dict[str, object]:
    """What a library call must not change for good. Modules set their own environment
    variables once, when first imported (TensorFlow, gymnasium's classic envs, Ray): they are
    imported first, as in a notebook that has run anything before."""
    import gymnasium.envs.classic_control  # noqa: F401
    import tensorflow as tf

    handlers = {
        int(s): signal.getsignal(s)
        for s in signal.valid_signals()
        if s not in (signal.SIGKILL, signal.SIGSTOP)
    }
    return {
        "signal handlers": handlers,
        "environment": dict(os.environ),
        "working directory": os.getcwd(),
        "faulthandler": faulthandler.is_enabled(),
        "threads": sorted(t.name for t in threading.enumerate()),
        "TensorFlow threads": (
            tf.config.threading.get_inter_op_parallelism_threads(),
            tf.config.threading.get_intra_op_parallelism_threads(),
        ),
    }


def differences(before: dict[str, object], after: dict[str, object]) -> dict[str, object]:
    """What changed, except Ray's session settings, which stay set by design
    (:data:`neuroevo.evaluation.ray.local.RAY_SESSION_ENVIRON`)."""
    found = {}
    for what, value in before.items():
        if isinstance(value, dict):
            changed = {
                k: (value.get(k), after[what].get(k))
                for k in value.keys() | after[what].keys()
                if value.get(k) != after[what].get(k) and k not in RAY_SESSION_ENVIRON
            }
            if changed:
                found[what] = changed
        elif value != after[what]:
            found[what] = (value, after[what])
    return found


def assert_leaves_the_process_as_found(
    call: Callable[[], object], ctrl_c: Callable[[], None]
) -> None:
    before = process_state()
    call()
    deadline = time.monotonic() + 60  # threads that were told to stop may take a moment
    while differences(before, process_state()).get("threads") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert differences(before, process_state()) == {}
    with pytest.raises(KeyboardInterrupt):  # a notebook's Ctrl-C still works
        ctrl_c()
        time.sleep(5)


def test_train_leaves_the_process_as_found(tmp_path, ctrl_c) -> None:
    overrides = {**SMALL_CARTPOLE, "budget.generations": 1, "noise.cache_dir": str(tmp_path)}
    assert_leaves_the_process_as_found(lambda: ne.train({}, overrides), ctrl_c)


def test_optimize_leaves_the_process_as_found(ctrl_c) -> None:
    def sphere(x: np.ndarray) -> np.ndarray:
        return (x**2).sum(axis=1)

    assert_leaves_the_process_as_found(
        lambda: ne.optimize(sphere, 3, "es", generations=2, population_size=4), ctrl_c
    )


@pytest.mark.slow
def test_a_ray_backed_evaluation_leaves_the_process_as_found(tmp_path, ctrl_c) -> None:
    """``ray.init`` installs a SIGTERM handler, enables faulthandler and sets environment
    variables (PYTHONBREAKPOINT sends ``breakpoint()`` to Ray's debugger); closing the
    evaluator puts them back. Ray's driver threads end with ``ray.shutdown``."""
    pytest.importorskip("ray")
    import ray.util.client  # noqa: F401 - sets RAY_CLIENT_MODE when first imported

    overrides = {
        **SMALL_CARTPOLE,
        "budget.generations": 1,
        "noise.cache_dir": str(tmp_path),
        "evaluator.backend": "ray",
    }
    assert_leaves_the_process_as_found(lambda: ne.train({}, overrides), ctrl_c)


RAY_AGAIN = textwrap.dedent(
    """
    import json, os, sys, tempfile
    import ray
    from ray.cluster_utils import Cluster
    import neuroevo as ne

    ne.train({}, dict(json.loads(sys.argv[1]), **{"evaluator.backend": "ray"}))
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="ne-ray-", dir="/tmp")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    ray.init(address=cluster.address)

    @ray.remote(num_cpus=1)
    class Probe:
        def answer(self):
            return 42

    print("ANSWER", ray.get(Probe.remote().answer.remote(), timeout=600), flush=True)
    ray.shutdown()
    cluster.shutdown()
    """
)


@pytest.mark.slow
def test_ray_started_again_in_the_process_runs_actors(tmp_path) -> None:
    """After a Ray-backed ``ne.train`` has put the process back, a Ray the same process starts
    later (a notebook that trains, then joins a cluster) still runs actors: putting back
    ``RAY_AUTH_MODE`` left its nodes without the token mode the driver kept, and every actor
    was cancelled before it started. A fresh process: the order of the suite must not matter."""
    pytest.importorskip("ray")
    overrides = {**SMALL_CARTPOLE, "budget.generations": 1, "noise.cache_dir": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", RAY_AGAIN, json.dumps(overrides)],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True,
        text=True,
        timeout=1800,  # a bound only for a hang: Ray starts slowly on a busy machine
    )
    assert "ANSWER 42" in done.stdout, done.stdout[-2000:] + done.stderr[-4000:]
