"""Every shipped config shrunk to run in seconds, and the metrics it produces: the reference a
refactor must reproduce exactly (``tests/data/shipped_metrics.json``).

Record the reference on a known-good tree with ``python tests/shipped_runs.py``; the test
``test_shipped_configs.py`` reruns each config with the recorded overrides and compares.
"""

from __future__ import annotations

import csv
import json
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"
REFERENCE = Path(__file__).resolve().parent / "data" / "shipped_metrics.json"

CLOCK_COLUMNS = {"wall_time_s", "frames_per_s"}
"""metrics.csv columns that depend on the clock, so differ between identical runs."""

COMMON = [
    "budget.generations=2",
    "budget.frames=null",
    "budget.hours=null",
    "budget.target_return=null",
    "env.max_episode_steps=25",
    "evaluator.workers=1",
    "evaluator.slots_per_worker=8",
    "noise.size=5000000",
    "logging.tensorboard=false",
    "logging.progress=false",
    "test.episodes=2",
    "test.max_episode_steps=25",
]


def shrink_overrides(config: Path) -> list[str]:
    """``--set`` overrides that shrink ``config`` to a few seconds of training."""
    data = yaml.safe_load(config.read_text())
    name = data["algorithm"]["name"]
    section = data["algorithm"].get(name, {})
    prefix = f"algorithm.{name}"
    overrides = [f"{prefix}.population_size=6"]
    if "truncation" in section:
        overrides.append(f"{prefix}.truncation=2")
    if section.get("validation_candidates", 0) > 0 or name == "random_search":
        overrides += [f"{prefix}.validation_candidates=2", f"{prefix}.validation_episodes=2"]
    if "center_episodes" in section:
        overrides.append(f"{prefix}.center_episodes=1")
    if "meta_population" in section:
        overrides.append(f"{prefix}.meta_population=2")
    if "emitters" in section:
        overrides.append(f"{prefix}.emitters=2")
    return [*COMMON, *overrides]


def train_rows(config: Path, overrides: list[str], run_dir: Path) -> list[dict[str, str]]:
    """Trains ``config`` with ``overrides`` in this process; its metrics.csv rows without the
    clock-dependent columns."""
    from neuroevo.cli.train import main

    args = ["--config", str(config), "--run-dir", str(run_dir), "--quiet"]
    for item in overrides:
        args += ["--set", item]
    code = main(args)
    if code != 0:
        raise RuntimeError(f"training {config.name} exited with {code}")
    with (run_dir / "metrics.csv").open() as handle:
        return [
            {k: v for k, v in row.items() if k not in CLOCK_COLUMNS}
            for row in csv.DictReader(handle)
        ]


def record() -> None:
    """Runs every shipped config and writes the reference file."""
    reference = {}
    for config in sorted(CONFIGS.glob("*.yaml")):
        overrides = shrink_overrides(config)
        with tempfile.TemporaryDirectory() as tmp:
            rows = train_rows(config, overrides, Path(tmp) / "run")
        reference[config.name] = {"overrides": overrides, "rows": rows}
        print(config.name, rows[-1], file=sys.stderr)
    REFERENCE.write_text(json.dumps(reference, indent=1) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    record()
