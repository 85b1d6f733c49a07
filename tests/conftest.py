"""Fixtures every test file shares."""

from __future__ import annotations

import os
import secrets

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
