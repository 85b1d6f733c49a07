"""Library calls leave the process as they found it: after ``ne.train``, ``ne.optimize`` and a
Ray-backed evaluation, the signal handlers, environment variables, working directory,
``faulthandler``, Python threads and TensorFlow's thread settings are those from before, and
a Ctrl-C (``_thread.interrupt_main``) still raises ``KeyboardInterrupt`` in a notebook.

No library call changes SIGINT: a suite whose Ctrl-C test failed had been started in the
background, which starts Python with SIGINT ignored (the ``ctrl_c`` fixture of
``conftest.py`` installs Python's handler for such tests)."""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from run_helpers import SMALL_CARTPOLE

import neuroevo as ne


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
    found = {}
    for what, value in before.items():
        if isinstance(value, dict):
            changed = {
                k: (value.get(k), after[what].get(k))
                for k in value.keys() | after[what].keys()
                if value.get(k) != after[what].get(k)
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
