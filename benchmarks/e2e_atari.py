"""The Atari generation row of ``python -m benchmarks e2e`` (``--suites atari_generation``,
issue #46): one GA generation of the peers' workload, its floors and where its wall time goes.

The workload: the VALID-padding Nature net (1.69M parameters), ``--population`` genomes (64)
with one episode each, capped at ``--generation-max-steps`` agent steps (1,000), on
``--slots`` env slots (32), default workers; float32 and bfloat16 kernels.

Measured in one process, setups interleaved round by round (``--repeats`` rounds, medians):

* env only: frames/s stepping every slot with random actions (best of 1 and 2 threads);
* forward only: forwards/s of each model over every slot (best of 1 and 2 threads);
* the serial floor ``1 / (1 / env + 1 / (4 * forwards))`` per dtype (no overlap of the two);
* end to end: ``Evaluator.evaluate`` of the generation per setup: frames/s, its share of the
  floor, the ratio to the first setup (float32) per round, and the breakdown of the
  generation's wall time: each kind's share of the workers' time (env steps, forward, refills,
  Python, waiting after the worker's last episode; averaged over workers) and the tail: the
  share of the wall time with fewer than half the slots running;
* the first ``evaluate`` call of a new ``Evaluator`` (tiny request) in this warm process, per
  setup, and in a new process (``first_call_new_process``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

from benchmarks.common import REPO_ROOT, print_table

FRAMES_PER_STEP = 4
KINDS = ("env", "net", "load", "python", "wait")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--generation-max-steps", type=int, default=1000, help="atari_generation: step cap"
    )
    parser.add_argument(
        "--generation-dtypes", default="float32,bfloat16", help="atari_generation: dtypes"
    )


def _setup(args: argparse.Namespace) -> tuple[Any, dict[str, Any], Any, Any]:
    from benchmarks.e2e import nature_valid
    from neuroevo.algorithms import make_algorithm
    from neuroevo.envs.atari import AtariEnv
    from neuroevo.evaluation import EvalRequest
    from neuroevo.genomes.noise import NoiseTable

    env = AtariEnv(args.game, args.slots)
    models = {
        dtype: nature_valid(args.slots, env, dtype=dtype)
        for dtype in args.generation_dtypes.split(",")
    }
    first = next(iter(models.values()))
    noise = NoiseTable(seed=args.seed, size=2 * first.num_params + 1_000_000, cache_dir=False)
    ga = make_algorithm(
        "ga",
        num_params=first.num_params,
        scales=first.init_scales(),
        noise=noise,
        seed=args.seed,
        population_size=args.population + 1,  # one slot is the elite's: N genomes evaluated
        truncation=min(20, args.population),
        validation_candidates=0,
    )
    request = ga.ask()
    request = EvalRequest(request.genomes, request.episode_seeds[:, :1])
    return env, models, request, ga.decoder.decode_batch


def breakdown(results: Any) -> dict[str, float]:
    """Shares of the generation's wall time: per kind averaged over the workers, and the tail."""
    stats = results.stats
    shares = {k: statistics.fmean(w.shares()[k] for w in stats.workers) for k in KINDS}
    return shares | {"tail": stats.tail_s() / stats.wall_s if stats.wall_s else 0.0}


def first_call_s(env: Any, model: Any, decode: Any, request: Any, **options: Any) -> float:
    """Seconds of a new Evaluator's first ``evaluate`` (two genomes, 3 steps)."""
    from neuroevo.evaluation import EvalRequest, Evaluator

    with Evaluator(env, model, decode, **options) as evaluator:
        start = time.perf_counter()
        evaluator.evaluate(EvalRequest(request.genomes[:2], request.episode_seeds[:2]), max_steps=3)
        return time.perf_counter() - start


def first_call_new_process(args: argparse.Namespace) -> float | None:
    """The first call of a new Evaluator in a new process (after its imports and env)."""
    code = (
        "import sys; from benchmarks import e2e_atari as m, e2e;"
        "a = e2e.parse_args(sys.argv[1:]);"
        "env, models, req, dec = m._setup(a);"
        "print(m.first_call_s(env, next(iter(models.values())), dec, req))"
    )
    argv = ["--game", args.game, "--slots", str(args.slots), "--generation-dtypes", "float32"]
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    return float(lines[-1]) if done.returncode == 0 and lines else None


def first_calls(
    env: Any, models: dict[str, Any], decode: Any, request: Any, repeats: int
) -> dict[str, dict[str, float]]:
    """Per dtype, a new Evaluator's first call in this process: ``traced`` with the model's
    shared graph functions dropped first (every new evaluator traced before #46), ``shared``
    with them kept; medians of ``repeats``, the two interleaved."""
    from neuroevo.evaluation import traced

    times: dict[str, dict[str, list[float]]] = {d: {"traced": [], "shared": []} for d in models}
    for _ in range(repeats):
        for dtype, model in models.items():
            model.__dict__.pop(traced._ATTRIBUTE, None)
            times[dtype]["traced"].append(first_call_s(env, model, decode, request))
            times[dtype]["shared"].append(first_call_s(env, model, decode, request))
    return {d: {k: statistics.median(v) for k, v in t.items()} for d, t in times.items()}


def _floors(env: Any, models: dict[str, Any], seed: int) -> dict[str, Any]:
    from benchmarks.e2e import env_only_rate, forward_rate

    env_fps = max(env_only_rate(env, t, 150, seed) for t in (1, 2))
    forwards = {d: max(forward_rate(m, env, t, 15) for t in (1, 2)) for d, m in models.items()}
    floors = {d: 1 / (1 / env_fps + 1 / (FRAMES_PER_STEP * f)) for d, f in forwards.items()}
    return {"env": env_fps, "forwards": forwards, "floors": floors}


def generation_row(args: argparse.Namespace, variants: dict[str, dict] | None = None) -> dict:
    """Floors, end-to-end setups (dtype x ``variants``: Evaluator options) and breakdowns;
    every round measures the floors, then runs each setup once."""
    from neuroevo.evaluation import Evaluator

    env, models, request, decode = _setup(args)
    variants = variants or {"": {}}
    slots = np.arange(args.slots, dtype=np.int32)
    for model in models.values():
        model.load(slots, decode(request.genomes[: args.slots]))
    first = first_calls(env, models, decode, request, max(args.repeats, 3))
    setups = {
        (dtype, variant): (model, options)
        for dtype, model in models.items()
        for variant, options in variants.items()
    }
    evaluators = {
        setup: Evaluator(env, model, decode, **options)
        for setup, (model, options) in setups.items()
    }
    for evaluator in evaluators.values():
        evaluator.evaluate(request, max_steps=3)
    runs: dict[Any, list] = {setup: [] for setup in setups}
    floors = []
    for r in range(args.repeats):
        floors.append(_floors(env, models, args.seed + r))
        for setup, evaluator in evaluators.items():
            runs[setup].append(evaluator.evaluate(request, max_steps=args.generation_max_steps))
    for evaluator in evaluators.values():
        evaluator.close()
    env.close()
    base = next(iter(setups))
    rows = {}
    for setup, results in runs.items():
        fps = [r.stats.frames_per_s for r in results]
        median = sorted(results, key=lambda r: r.stats.frames_per_s)[len(results) // 2]
        same = [
            np.array_equal(a.returns, b.returns) for a, b in zip(results, runs[base], strict=True)
        ]
        rows[setup] = {
            "frames_per_s": statistics.median(fps),
            "frames_per_s_rounds": fps,
            "of_floor": statistics.median(
                f / fl["floors"][setup[0]] for f, fl in zip(fps, floors, strict=True)
            ),
            "vs_first": statistics.median(
                a / b.stats.frames_per_s for a, b in zip(fps, runs[base], strict=True)
            ),
            "wall_s": median.stats.wall_s,
            "frames": median.stats.frames,
            "steps": median.stats.steps,
            "mean_return": float(median.returns.mean()),
            "same_episode_returns_as_first": float(
                np.mean(median.returns == runs[base][0].returns)
            ),
            "same_returns_every_round": all(same),
            "breakdown": breakdown(median),
        }
    return {
        "env_frames_per_s": statistics.median(f["env"] for f in floors),
        "forwards_per_s": {d: statistics.median(f["forwards"][d] for f in floors) for d in models},
        "floor_frames_per_s": {
            d: statistics.median(f["floors"][d] for f in floors) for d in models
        },
        "floor_rounds": floors,
        "first_call_s": first,
        "runs": {" ".join(filter(None, k)): v for k, v in rows.items()},
    }


def print_generation(row: dict, args: argparse.Namespace) -> None:
    floors = [
        [d, row["env_frames_per_s"], f, row["floor_frames_per_s"][d]]
        for d, f in row["forwards_per_s"].items()
    ]
    print_table(
        f"Atari generation floors ({args.game}, nature_valid, {args.slots} slots)",
        ["dtype", "env frames/s", "forwards/s", "serial floor frames/s"],
        floors,
    )
    table = []
    for name, r in row["runs"].items():
        b = r["breakdown"]
        table.append(
            [
                name,
                r["frames_per_s"],
                f"{100 * r['of_floor']:.0f}%",
                f"{r['vs_first']:.2f}",
                f"{r['wall_s']:.1f}",
                "/".join(f"{100 * b[k]:.0f}" for k in KINDS),
                f"{100 * b['tail']:.0f}%",
                f"{r['mean_return']:.1f}",
                f"{100 * r['same_episode_returns_as_first']:.0f}%",
            ]
        )
    print_table(
        f"One GA generation ({args.population} genomes, 1 episode, <= "
        f"{args.generation_max_steps} steps; medians of {args.repeats} interleaved rounds; "
        "floors measured in each round)",
        [
            "setup",
            "frames/s",
            "of floor",
            "vs first",
            "wall s",
            "env/net/load/py/wait %",
            "tail",
            "mean return",
            "returns = first",
        ],
        table,
    )
    print_table(
        "First evaluate call of a new Evaluator in this process (2 genomes, 3 steps; median)",
        ["dtype", "traced (each evaluator traces)", "shared (traced functions reused)"],
        [
            [d, f"{t['traced']:.3f} s", f"{t['shared']:.3f} s"]
            for d, t in row["first_call_s"].items()
        ],
    )
