"""``python -m benchmarks memory``: a recurrent policy against an MLP on a task needing memory.

Trains ``configs/lstm_cartpole_no_velocity.yaml`` (a GA on CartPole without velocities) with
its LSTM policy and with an MLP of about the same parameter count, for several seeds, under
the same budget of generations, then plays each final elite on fresh episode seeds. A run
solves the task when its elite's mean return over those episodes is at least 400 (of 500).
Prints a table and writes JSON; docs/MODELS.md records the numbers.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import neuroevo as ne
from benchmarks.common import REPO_ROOT

CONFIG = REPO_ROOT / "configs" / "lstm_cartpole_no_velocity.yaml"
SOLVED = 400.0
TEST_SEED = 10_000  # episodes played after training use seeds the run never saw


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks memory", description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--models", nargs="+", default=["lstm", "mlp"], choices=["lstm", "gru", "mlp"]
    )
    parser.add_argument("--generations", type=int, default=80)
    parser.add_argument("--test-episodes", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    return parser.parse_args(argv)


def run(model: str, seed: int, generations: int, test_episodes: int) -> dict:
    """One training run and its elite's test returns."""
    start = time.perf_counter()
    result = ne.train(
        CONFIG, {"model.name": model, "seed": seed, "budget.generations": generations}
    )
    returns = result.policy.play(test_episodes, seed=TEST_SEED)
    episodes = sum(s.episodes for s in result.summaries)
    first_solved = next(
        (s.generation for s in result.summaries if (s.elite_score or 0.0) >= SOLVED), None
    )
    return {
        "model": model,
        "seed": seed,
        "params": int(result.policy.weights.size),
        "generations": len(result.summaries),
        "episodes": episodes,
        "first_generation_elite_ge_400": first_solved,
        "test_mean": float(returns.mean()),
        "test_min": float(returns.min()),
        "solved": bool(returns.mean() >= SOLVED),
        "seconds": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args([] if argv is None else argv)
    rows = []
    print(
        f"{'model':6} {'seed':>4} {'params':>6} {'gens':>5} {'episodes':>8} {'first>=400':>10} "
        f"{'test mean':>9} {'test min':>8} solved"
    )
    for model in args.models:
        for seed in args.seeds:
            row = run(model, seed, args.generations, args.test_episodes)
            rows.append(row)
            first = row["first_generation_elite_ge_400"]
            print(
                f"{model:6} {seed:>4} {row['params']:>6} {row['generations']:>5} "
                f"{row['episodes']:>8} {'-' if first is None else first:>10} "
                f"{row['test_mean']:>9.1f} {row['test_min']:>8.0f} {row['solved']}",
                flush=True,
            )
    for model in args.models:
        solved = [r["solved"] for r in rows if r["model"] == model]
        mean = np.mean([r["test_mean"] for r in rows if r["model"] == model])
        print(f"{model}: {sum(solved)}/{len(solved)} seeds solved, mean test return {mean:.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0
