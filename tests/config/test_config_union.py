"""The config as a tagged union: only the selected algorithm, env kind and model sections are
built, saved and compared on resume. A run resumes after an unused section's key changed, and
a run directory written when config.yaml held every registered section still resumes; both
continue exactly as the uninterrupted run recorded in tests/data/shipped_metrics.json."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from shipped_runs import CLOCK_COLUMNS, CONFIGS, REFERENCE, train_rows

from neuroevo.algorithms import ALGORITHMS
from neuroevo.cli import train
from neuroevo.config.schema import ConfigError, load_config
from neuroevo.core.params import to_dict
from neuroevo.envs import ENV_KINDS
from neuroevo.models import MODELS

NAME = "maze_ga.yaml"
RECORDED = json.loads(REFERENCE.read_text())[NAME]


def first_generation(run_dir):
    """The recorded run's first generation, as a run directory to resume."""
    overrides = [o for o in RECORDED["overrides"] if not o.startswith("budget.generations")]
    rows = train_rows(CONFIGS / NAME, [*overrides, "budget.generations=1"], run_dir)
    assert rows == RECORDED["rows"][:1]


def resume(run_dir, *overrides: str) -> list[dict[str, str]]:
    args = ["--resume", str(run_dir), "--quiet", "--set", "budget.generations=2"]
    for item in overrides:
        args += ["--set", item]
    assert train.main(args) == 0
    return train_rows_of(run_dir)


def train_rows_of(run_dir):
    with (run_dir / "metrics.csv").open() as handle:
        return [
            {k: v for k, v in row.items() if k not in CLOCK_COLUMNS}
            for row in csv.DictReader(handle)
        ]


def test_only_the_selected_sections_are_built_and_saved(tmp_path):
    cfg = load_config(CONFIGS / NAME, ["algorithm.es.sigma=0.5"])
    assert cfg.algorithm.ga is not None and cfg.algorithm.es is None
    assert cfg.env.maze is not None and cfg.env.atari is None and cfg.model.mlp is not None
    first_generation(tmp_path / "run")
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert [k for k in saved["algorithm"] if k in ALGORITHMS] == ["ga"]
    assert [k for k in saved["env"] if k in ENV_KINDS] == ["maze"]
    assert [k for k in saved["model"] if k in MODELS] == ["mlp"]
    # An unused section is still checked against its class: a typo or bad value fails.
    with pytest.raises(ConfigError, match=r"algorithm\.es\.sigma: -1\.0 must be > 0"):
        load_config(CONFIGS / NAME, ["algorithm.es.sigma=-1"])
    with pytest.raises(ConfigError, match=r"unknown key 'algorithm\.es\.sigmaa'"):
        load_config(CONFIGS / NAME, ["algorithm.es.sigmaa=1"])


def test_resuming_a_ga_run_after_changing_an_unused_es_key(tmp_path):
    run_dir = tmp_path / "run"
    first_generation(run_dir)
    assert resume(run_dir, "algorithm.es.sigma=0.5", "env.atari.frame_skip=2") == RECORDED["rows"]
    assert train.main(["--resume", str(run_dir), "--set", "algorithm.ga.truncation=3"]) == 2


def test_an_old_run_directory_with_every_section_resumes(tmp_path):
    run_dir = tmp_path / "run"
    first_generation(run_dir)
    path = run_dir / "config.yaml"
    old = yaml.safe_load(path.read_text())
    for key, registry in (("algorithm", ALGORITHMS), ("env", ENV_KINDS), ("model", MODELS)):
        for name in registry:
            options = registry.params_class(name)
            if options is not None and to_dict(options()):  # sections with keys
                old[key].setdefault(name, to_dict(options()))
    assert "es" in old["algorithm"] and "atari" in old["env"]
    path.write_text(yaml.safe_dump(old, sort_keys=False))
    assert resume(run_dir) == RECORDED["rows"]
