"""The MLflow tracker (``logging.mlflow``); ``mlflow`` is imported here only."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunStatus
from mlflow.tracking import MlflowClient

from neuroevo.loggers.params import MlflowParams

__all__ = ["MlflowTracker", "flatten"]

BATCH = 100
"""Parameters per ``log_batch`` call (MLflow's limit)."""

MAX_VALUE = 6000
"""Longest parameter value MLflow stores; longer ones (long lists) are cut."""


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict as ``{"a.b.c": value}`` (MLflow parameters are flat)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            flat |= flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


class MlflowTracker:
    """An MLflow run: the flattened config as its parameters, scalars as metrics, the policies
    as artifacts under ``policy/``.

    Args:
        options: The ``logging.mlflow`` section.
        config: The resolved config (nested dict).
        run_name: Default run name (the run directory's name).
        run_id: The MLflow run to continue (resume), or None for a new one.
    """

    name = "mlflow"

    def __init__(
        self,
        options: MlflowParams,
        config: Mapping[str, Any],
        run_name: str,
        run_id: str | None,
    ) -> None:
        self._client = MlflowClient(tracking_uri=options.tracking_uri)
        if run_id is not None:
            self._client.get_run(run_id)  # raises when the store does not have it
            self._client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
            self.run_id = run_id
            return
        experiment = self._client.get_experiment_by_name(options.experiment)
        experiment_id = (
            self._client.create_experiment(options.experiment)
            if experiment is None
            else experiment.experiment_id
        )
        tags = {key: str(value) for key, value in options.tags.items()}
        run = self._client.create_run(
            experiment_id, run_name=options.run_name or run_name, tags=tags
        )
        self.run_id = run.info.run_id
        params = [Param(key, str(value)[:MAX_VALUE]) for key, value in flatten(config).items()]
        for start in range(0, len(params), BATCH):
            self._client.log_batch(self.run_id, params=params[start : start + BATCH])

    def scalars(self, step: int, values: Mapping[str, float | int]) -> None:
        stamp = int(time.time() * 1000)
        metrics = [Metric(key, float(value), stamp, int(step)) for key, value in values.items()]
        self._client.log_batch(self.run_id, metrics=metrics)

    def finish(self, artifacts: Sequence[Path]) -> None:
        for path in artifacts:
            self._client.log_artifact(self.run_id, str(path), artifact_path="policy")
        status = RunStatus.FINISHED if artifacts else RunStatus.KILLED
        self._client.set_terminated(self.run_id, RunStatus.to_string(status))
