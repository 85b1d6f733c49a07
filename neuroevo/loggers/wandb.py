"""The W&B tracker (``logging.wandb``); ``wandb`` is imported here only."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import wandb

from neuroevo.loggers.params import WandbParams

__all__ = ["WandbTracker"]


class WandbTracker:
    """A W&B run: the config as its config, scalars with ``run.log``, the policies as one
    ``model`` artifact.

    Args:
        options: The ``logging.wandb`` section.
        config: The resolved config (nested dict).
        run_name: Default display name (the run directory's name).
        run_id: The W&B run to continue (resume), or None for a new one.
    """

    name = "wandb"

    def __init__(
        self,
        options: WandbParams,
        config: Mapping[str, Any],
        run_name: str,
        run_id: str | None,
    ) -> None:
        if options.dir is not None:
            Path(options.dir).mkdir(parents=True, exist_ok=True)
        self._artifact_name = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{run_name}-policy")
        self._run = wandb.init(
            project=options.project,
            entity=options.entity,
            name=options.run_name or run_name,
            tags=list(options.tags),
            config=dict(config),
            dir=options.dir,
            mode="offline" if options.offline else "online",
            id=run_id,
            resume="allow" if run_id is not None else None,
            settings=wandb.Settings(console="off", silent=True, disable_git=True),
        )
        self.run_id = self._run.id

    def scalars(self, step: int, values: Mapping[str, float | int]) -> None:
        self._run.log(dict(values), step=step)

    def finish(self, artifacts: Sequence[Path]) -> None:
        if artifacts:
            artifact = wandb.Artifact(self._artifact_name, type="model")
            for path in artifacts:
                artifact.add_file(str(path))
            self._run.log_artifact(artifact)
        self._run.finish(exit_code=0 if artifacts else 1)
