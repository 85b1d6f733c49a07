"""Shared steps and settings of the tests that train: a run of seconds, and training in a
subprocess, killing it and resuming (nothing is lost)."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

SMALL_CARTPOLE = {
    "env.kind": "gym",
    "env.id": "CartPole-v1",
    "env.max_episode_steps": 20,
    "env.gym.threads": 1,
    "model.name": "mlp",
    "model.mlp.hidden_sizes": [4],
    "algorithm.name": "es",
    "algorithm.es.population_size": 4,
    "noise.size": 100_000,
    "evaluator.workers": 1,
    "evaluator.slots_per_worker": 4,
    "logging.tensorboard": False,
    "logging.progress": False,
}
"""A run of seconds: ES on CartPole with a tiny MLP (``ne.train`` overrides)."""

CLOCK_COLUMNS = {"wall_time_s", "frames_per_s"}
"""metrics.csv columns that depend on the clock, so differ between identical runs."""


def search_rows(run_dir: Path) -> list[dict[str, str]]:
    """The run's metrics.csv rows without the clock-dependent columns."""
    with (run_dir / "metrics.csv").open() as handle:
        return [
            {k: v for k, v in row.items() if k not in CLOCK_COLUMNS}
            for row in csv.DictReader(handle)
        ]


def train_and_kill(args: list[str], run_dir: Path, checkpoint: int, delay_s: float = 0.0) -> None:
    """Starts ``neuroevo.train *args --run-dir run_dir``, waits for checkpoint ``checkpoint``
    (so there is state to lose), waits ``delay_s`` more and SIGKILLs it."""
    command = [sys.executable, "-m", "neuroevo.train", *args, "--run-dir", str(run_dir)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 900
    while not _saved(run_dir, checkpoint):
        if process.poll() is not None:
            # A short run may save the checkpoint, finish (pruning it) and exit between two
            # looks: then there was nothing left to kill, and resuming must still match.
            assert process.returncode == 0, process.stderr.read().decode()
            assert _saved(run_dir, checkpoint, finished=True), "the run saved no checkpoint"
            return
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    time.sleep(delay_s)
    process.send_signal(signal.SIGKILL)
    process.wait()


def _saved(run_dir: Path, checkpoint: int, finished: bool = False) -> bool:
    """Whether checkpoint ``checkpoint`` or a later one is in the run directory (older ones are
    pruned as newer ones are saved); ``finished``: any checkpoint at all."""
    steps = [
        int(path.name.removeprefix("ckpt-"))
        for path in (run_dir / "checkpoints").glob("ckpt-*")
        if path.name.removeprefix("ckpt-").isdigit()
    ]
    return any(step >= (1 if finished else checkpoint) for step in steps)


GRID_STRATEGIES = ("map_elites", "cma_me", "cma_mae")


def tiny_maze_config(tmp_path: Path, algorithm: str) -> Path:
    """A seconds-long run of ``algorithm`` on a shortened maze (which has a behaviour, for
    the grid strategies): 8 genomes of an 8-unit MLP, 40-step episodes, 4 generations."""
    section: dict = {"population_size": 8}
    if algorithm in GRID_STRATEGIES:
        section |= {"cells": [4, 4], "behavior_low": [5.0, 5.0], "behavior_high": [200.0, 200.0]}
    if algorithm in ("cma_me", "cma_mae"):
        section |= {"emitters": 2, "qd_score_offset": -300.0}
    config = {
        "seed": 4,
        "algorithm": {"name": algorithm, algorithm: section},
        "env": {"kind": "maze", "id": "hard", "max_episode_steps": 40},
        "model": {"name": "mlp", "mlp": {"hidden_sizes": [8]}},
        "behavior": {"kind": "final"},
        "noise": {"size": 1_000_000},
        "evaluator": {"workers": 1, "slots_per_worker": 8},
        "budget": {"generations": 4},
        "logging": {"progress": False, "tensorboard": False},
    }
    path = tmp_path / f"{algorithm}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
