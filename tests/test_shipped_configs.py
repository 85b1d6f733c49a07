"""Every shipped config, shrunk to seconds, still trains to the metrics recorded before the
structural refactors (tests/data/shipped_metrics.json, written by tests/shipped_runs.py): the
code may move, the search it runs may not change."""

from __future__ import annotations

import json

import pytest
from shipped_runs import CONFIGS, REFERENCE, train_rows

RECORDED = json.loads(REFERENCE.read_text())


def test_every_shipped_config_is_recorded():
    assert sorted(RECORDED) == sorted(path.name for path in CONFIGS.glob("*.yaml"))


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_shipped_config_reproduces_recorded_metrics(name, tmp_path):
    recorded = RECORDED[name]
    rows = train_rows(CONFIGS / name, recorded["overrides"], tmp_path / "run")
    assert rows == recorded["rows"]
