"""Behaviour functions for gymnasium envs (``env.gym.behavior``) that break the contract."""

from __future__ import annotations

import itertools

import numpy as np

_calls = itertools.count()


def raises(obs, info):
    """Fails as a function reading a key the env's info lacks would."""
    return info["x_position"]


def varying(obs, info):
    """Alternates between 2 and 3 values from one call to the next."""
    return np.zeros(2 + next(_calls) % 2)


_late_calls = itertools.count()


def varying_late(obs, info):
    """Two values for the first 60 calls (more than a probe episode makes), then three."""
    return np.zeros(2 if next(_late_calls) < 60 else 3)
