"""Fixtures every test file shares."""

from __future__ import annotations

import _thread
import os
import secrets
import signal
from collections.abc import Callable, Iterator

import numpy as np
import pytest

SEED_VARIABLE = "NEUROEVO_TEST_SEED"
"""Set to a printed seed to replay a random test's inputs exactly."""


@pytest.fixture
def rng() -> np.random.Generator:
    """A generator with a fresh seed on every run, printed so that pytest shows it with a
    failure; ``NEUROEVO_TEST_SEED=<seed>`` replays it."""
    seed = int(os.environ.get(SEED_VARIABLE) or secrets.randbits(63))
    print(f"random inputs from seed {seed} (replay with {SEED_VARIABLE}={seed})")
    return np.random.default_rng(seed)


@pytest.fixture
def ctrl_c() -> Iterator[Callable[[], None]]:
    """A Ctrl-C for the main thread (``_thread.interrupt_main``), which raises
    ``KeyboardInterrupt`` only while Python's own SIGINT handler is installed. A suite started
    in the background by a non-interactive shell (``pytest &``, a CI step, a script run with
    ``&``) inherits SIGINT ignored, and Python then installs no handler, so the test installs
    it and puts the inherited disposition back afterwards."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield _thread.interrupt_main
    finally:
        signal.signal(signal.SIGINT, inherited)
