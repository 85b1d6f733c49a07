"""The ``logging.wandb`` and ``logging.mlflow`` config sections (light: the config loads them
without importing either package)."""

from __future__ import annotations

import dataclasses
from typing import Any

from neuroevo.core.params import Params, check

__all__ = ["MlflowParams", "WandbParams"]


@dataclasses.dataclass(frozen=True)
class WandbParams(Params):
    """Where a run is logged in Weights & Biases (``pip install "neuroevo[wandb]"``).

    Attributes:
        project: W&B project.
        entity: W&B user or team; null: the logged-in user's default.
        run_name: Display name of the W&B run; null: the run directory's name.
        tags: Tags of the W&B run.
        offline: Write the W&B run to local files only (``wandb sync`` uploads them later);
            needs no account and no network.
        dir: Directory under which W&B keeps its files (``<dir>/wandb/``); null: W&B's default
            (``WANDB_DIR``, else the working directory).
    """

    project: str = "neuroevo"
    entity: str | None = None
    run_name: str | None = None
    tags: tuple[str, ...] = ()
    offline: bool = False
    dir: str | None = None

    def _validate(self) -> None:
        check(bool(self.project.strip()), "project", self.project, "not empty")


@dataclasses.dataclass(frozen=True)
class MlflowParams(Params):
    """Where a run is logged in MLflow (``pip install "neuroevo[mlflow]"``).

    Attributes:
        tracking_uri: The tracking server (``http://host:5000``) or a local store
            (``sqlite:///mlflow.db``, ``file:/path/mlruns``), which needs no network;
            null: ``MLFLOW_TRACKING_URI``, else MLflow's default.
        experiment: MLflow experiment, created when missing.
        run_name: Name of the MLflow run; null: the run directory's name.
        tags: Tags of the MLflow run, name to value.
    """

    tracking_uri: str | None = None
    experiment: str = "neuroevo"
    run_name: str | None = None
    tags: dict[str, Any] = dataclasses.field(default_factory=dict)

    def _validate(self) -> None:
        check(bool(self.experiment.strip()), "experiment", self.experiment, "not empty")
