"""Run directories written by an earlier neuroevo, which later code must resume exactly
(``tests/data/old_runs/``).

Record them on a known-good tree with ``python tests/old_runs.py``: for each case, a run
directory stopped after :data:`STOPPED` generations (config.yaml, metrics, TensorBoard events,
checkpoints, elite and best policies as that code wrote them) and ``expected.json``, the
metrics rows of the same run trained for :data:`FINISHED` generations without stopping.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from shipped_runs import CONFIGS, shrink_overrides, train_rows

OLD_RUNS = Path(__file__).resolve().parent / "data" / "old_runs"

CASES = {
    "es_hopper": ("es_hopper.yaml", ["logging.tensorboard=true"]),
    "maze_ga": ("maze_ga.yaml", []),
}
"""Case name -> (shipped config, overrides beside its shrinking ones). ES with observation
normalisation and TensorBoard; a GA whose elite is a seed chain."""

STOPPED = 2
FINISHED = 3


def overrides(case: str, generations: int) -> list[str]:
    """The overrides a case's run was trained with, for ``generations`` generations."""
    config, extra = CASES[case]
    return [*shrink_overrides(CONFIGS / config), *extra, f"budget.generations={generations}"]


def record() -> None:
    """Writes every case's stopped run directory and its uninterrupted metrics."""
    for case, (config, _) in CASES.items():
        target = OLD_RUNS / case
        shutil.rmtree(target, ignore_errors=True)
        with tempfile.TemporaryDirectory() as tmp:
            finished = train_rows(CONFIGS / config, overrides(case, FINISHED), Path(tmp) / "run")
        train_rows(CONFIGS / config, overrides(case, STOPPED), target / "run")
        (target / "expected.json").write_text(json.dumps(finished, indent=1) + "\n")
        print(case, finished[-1], file=sys.stderr)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    record()
