"""``python -m benchmarks e2e``: end-to-end evaluation throughput against its floors.

``--suites atari,mujoco,maze`` (all by default; ``--quick`` for a small smoke run). Atari, for
each model (default ``nature_large`` and ``nature_valid``, the VALID-padding Nature net) on one
game, in one run:

* env only: frames/s stepping every slot with random actions, one graph call per step, from 1
  and from 2 threads over disjoint slot halves (best kept);
* forward only: forwards/s of ``model.act`` over every slot, 1 and 2 threads (best kept);
* the serial floor they imply when env steps and forwards share the CPU without overlapping:
  ``1 / (1 / env_frames_per_s + 1 / (4 * forwards_per_s))`` (4 frames per agent step);
* end to end: ``Evaluator.evaluate`` on the population of a GA generation (``GA.ask()``) with
  the in-graph rollout (``graph``) and the per-step evaluator (``step``) at each K, side by
  side: frames/s, share of the floor, ratio to the per-step path, Python calls per agent step,
  the share of forward time hidden behind other workers' env steps, and each worker's time
  split. The floor is measured before and after these runs (mean used).

Then the overlap itself, without a GPU, on the per-step path: the same generation with a
simulated accelerator (``simulated_latency_s``: one device, used by one forward call at a
time, no CPU) whose latency is a fraction of the env step time per call, with K = 1 and the
best K. Synchronously the latency adds to every step; pipelined, other workers step their envs
meanwhile.

MuJoCo and maze rows: ``benchmarks/e2e_rollout.py``.

Setups are compared on runs interleaved in time (``--repeats`` each, median kept), because the
machines here are shared and their speed drifts.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import time
from typing import Any

import numpy as np
import tensorflow as tf

from benchmarks import e2e_atari, e2e_rollout
from benchmarks.common import print_table, write_json
from neuroevo.envs.base import BatchedEnv
from neuroevo.evaluation import (
    TIME_KINDS,
    EvalRequest,
    EvalResults,
    Evaluator,
    inter_op_threads,
    split_slots,
)
from neuroevo.models.base import PopulationModel

FRAMES_PER_STEP = 4


def env_only_rate(env: BatchedEnv, threads: int, steps: int, seed: int) -> float:
    """Frames/s of ``steps`` random-action steps of every slot, ``threads`` callers."""

    @tf.function(autograph=False)
    def step(indices, actions):
        result = env.step(indices, actions)
        with tf.control_dependencies([result.reward]):
            return result.terminated | result.truncated, env.frames(indices)

    @tf.function(autograph=False)
    def reset(indices, seeds):
        with tf.control_dependencies([env.reset(indices, seeds)]):
            return env.frames(indices)

    index_spec = tf.TensorSpec([None], tf.int32)
    step = step.get_concrete_function(index_spec, tf.TensorSpec([None], tf.int32))
    reset = reset.get_concrete_function(index_spec, tf.TensorSpec([None], tf.int64))
    num_actions = env.action_spec.num_actions

    def run(first: int, end: int) -> int:
        rng = np.random.default_rng(seed + first)
        indices = np.arange(first, end, dtype=np.int32)
        last = reset(indices, rng.integers(0, 2**31, indices.size)).numpy()
        frames = 0
        for _ in range(steps):
            done, now = (
                t.numpy()
                for t in step(indices, rng.integers(0, num_actions, indices.size, np.int32))
            )
            frames += int((now - last).sum())
            last = now
            if done.any():
                again = reset(indices[done], rng.integers(0, 2**31, int(done.sum()))).numpy()
                frames += int(again.sum())
                last[done] = again
        return frames

    ranges = split_slots(env.num_slots, threads)
    for first, end in ranges:  # graphs instantiated before timing
        indices = np.arange(first, end, dtype=np.int32)
        reset(indices, indices.astype(np.int64))
        step(indices, np.zeros(indices.size, np.int32))
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        frames = sum(pool.map(lambda r: run(*r), ranges))
        return frames / (time.perf_counter() - start)


def forward_rate(model: PopulationModel, env: BatchedEnv, threads: int, calls: int) -> float:
    """Forwards/s of ``model.act`` over every slot, ``threads`` callers on disjoint slots."""
    everything = tf.range(env.num_slots)
    env.reset(everything, tf.range(env.num_slots, dtype=tf.int64))
    observations = env.observation(everything).numpy()

    @tf.function(autograph=False)
    def act(indices, obs):
        return model.act(indices, obs)

    act = act.get_concrete_function(
        tf.TensorSpec([None], tf.int32),
        tf.TensorSpec([None, *env.observation_spec.shape], env.observation_spec.dtype),
    )

    def run(first: int, end: int) -> int:
        indices, obs = np.arange(first, end, dtype=np.int32), observations[first:end]
        for _ in range(calls):
            act(indices, obs).numpy()
        return indices.size * calls

    ranges = split_slots(env.num_slots, threads)
    for first, end in ranges:
        act(np.arange(first, end, dtype=np.int32), observations[first:end])
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        forwards = sum(pool.map(lambda r: run(*r), ranges))
        return forwards / (time.perf_counter() - start)


def compare(
    env: BatchedEnv,
    model: PopulationModel,
    request: Any,
    decode: Any,
    setups: list[tuple[str, int, float]],
    *,
    max_steps: int,
    repeats: int,
) -> dict[tuple[str, int, float], EvalResults]:
    """Per ``(rollout, workers, simulated latency)`` setup, the median-throughput run of
    ``repeats`` evaluations of the GA request.

    Repeats are interleaved over the setups so that a slow phase of a shared machine hits
    all of them alike.
    """
    evaluators = {
        (rollout, k, latency): Evaluator(
            env, model, decode, workers=k, simulated_latency_s=latency, rollout=rollout
        )
        for rollout, k, latency in setups
    }
    warm = min(len(request.genomes), env.num_slots)
    for evaluator in evaluators.values():  # graph instantiation stays out of the timing
        evaluator.evaluate(
            EvalRequest(request.genomes[:warm], request.episode_seeds[:warm, :1]), max_steps=3
        )
    runs: dict[tuple[str, int, float], list[EvalResults]] = {setup: [] for setup in evaluators}
    for _ in range(repeats):
        for setup, evaluator in evaluators.items():
            runs[setup].append(evaluator.evaluate(request, max_steps=max_steps))
    for evaluator in evaluators.values():
        evaluator.close()
    return {
        setup: sorted(r, key=lambda x: x.stats.frames_per_s)[len(r) // 2]
        for setup, r in runs.items()
    }


def nature_valid(num_slots: int, env: BatchedEnv, dtype: str = "float32") -> PopulationModel:
    """The Nature network with VALID padding (as the EvoTorch and Uber Atari nets use):
    conv 8x8/4 32, 4x4/2 64, 3x3/1 64, dense 512; 1.69M parameters for 18 actions."""
    from neuroevo.models.layers import Conv2D, Dense, Flatten
    from neuroevo.models.sequential import SequentialModel

    layers = [
        Conv2D(32, 8, 4, padding="VALID", name="conv1"),
        Conv2D(64, 4, 2, padding="VALID", name="conv2"),
        Conv2D(64, 3, 1, padding="VALID", name="conv3"),
        Flatten(name="flatten"),
        Dense(512, name="fc"),
    ]
    return SequentialModel(num_slots, env.observation_spec, env.action_spec, layers, dtype=dtype)


def measure_floor(env: BatchedEnv, model: PopulationModel, seed: int) -> dict[str, Any]:
    """Env-only and forward-only rates (best of 1 and 2 threads) and the floor they imply."""
    env_rates = {t: env_only_rate(env, t, 150, seed) for t in (1, 2)}
    forward_rates = {t: forward_rate(model, env, t, 15) for t in (1, 2)}
    env_fps, forwards = max(env_rates.values()), max(forward_rates.values())
    return {
        "env_frames_per_s": env_fps,
        "forwards_per_s": forwards,
        "floor_frames_per_s": 1.0 / (1.0 / env_fps + 1.0 / (FRAMES_PER_STEP * forwards)),
        "env_frames_per_s_by_threads": env_rates,
        "forwards_per_s_by_threads": forward_rates,
    }


def run_summary(results: EvalResults) -> dict[str, Any]:
    """Throughput, Python overhead, hidden forward time and per-worker time split."""
    stats = results.stats
    net = sum(w.seconds["net"] for w in stats.workers)
    return {
        "frames_per_s": stats.frames_per_s,
        "steps_per_s": stats.steps_per_s,
        "wall_s": stats.wall_s,
        "frames": stats.frames,
        "steps": stats.steps,
        "episodes": stats.episodes,
        "python_per_call_us": stats.python_per_call_s * 1e6,
        "python_calls_per_step": stats.python_calls_per_step,
        "dispatch_per_call_us": stats.dispatch_per_call_s * 1e6,
        "net_hidden_share": stats.overlap_s("net", "env") / net if net > 0 else 0.0,
        "env_per_call_ms": 1e3
        * sum(w.seconds["env"] for w in stats.workers)
        / max(sum(w.calls for w in stats.workers), 1),
        "workers": [
            {"slots": list(w.slots), "calls": w.calls, "shares": w.shares()} for w in stats.workers
        ],
    }


def split_text(summary: dict[str, Any]) -> str:
    """Per worker ``env/net/load/python/wait`` percentages, e.g. ``45/38/1/6/10``."""
    return "  ".join(
        "/".join(f"{100 * w['shares'][k]:.0f}" for k in TIME_KINDS) for w in summary["workers"]
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks e2e", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--suites",
        default="atari,mujoco,maze",
        help="which rows: atari (GA generation, graph vs per-step evaluator at each K, vs the "
        "serial floor), atari_generation (issue #46's workload: floors, fp32 vs bf16, the "
        "generation's time breakdown, first calls), mujoco (ES vs the C++ physics loop), maze "
        "(NS-ES generation)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and one round: a smoke run"
    )
    parser.add_argument("--game", default="frostbite", help="Atari game (default frostbite)")
    parser.add_argument(
        "--models",
        default="nature_large,nature_valid",
        help="Atari models: registered names or nature_valid (the VALID-padding Nature net)",
    )
    parser.add_argument("--slots", type=int, default=32, help="env/network slots")
    parser.add_argument(
        "--population",
        type=int,
        default=64,
        help="GA population size (one slot is the elite's: N - 1 genomes are evaluated)",
    )
    parser.add_argument("--max-steps", type=int, default=400, help="agent steps per episode")
    parser.add_argument("--workers", default="1,2,3", help="K values; 1 is synchronous")
    parser.add_argument("--repeats", type=int, default=2, help="runs per setup, interleaved")
    parser.add_argument(
        "--latency-fractions",
        default="0.5,0.9",
        help="simulated latencies, as fractions of the best K's env step time per call, "
        "tried with K=1 and the best K on the first model ('' skips)",
    )
    parser.add_argument(
        "--inter-op-threads",
        type=int,
        default=0,
        help="TensorFlow inter-op threads (default: max(cores, largest K); each worker's "
        "graph call holds one)",
    )
    parser.add_argument(
        "--first-call-new-process",
        action="store_true",
        help="atari_generation: also time a new Evaluator's first call in a new process",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="bench_results/e2e.json")
    e2e_rollout.add_arguments(parser)
    e2e_atari.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.population, args.max_steps, args.slots = "nature_small", 16, 100, 8
        args.workers, args.repeats, args.latency_fractions = "1,2", 1, ""
        args.mujoco_tasks, args.mujoco_slots = "Hopper", "32"
    return args


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints tables and writes JSON."""
    args = parse_args([] if argv is None else argv)
    workers = [int(k) for k in args.workers.split(",")]
    args.inter_op_threads = args.inter_op_threads or max(inter_op_threads(), *workers)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    suites = args.suites.split(",")
    unknown = set(suites) - {"atari", "atari_generation", "mujoco", "maze"}
    if unknown:
        print(
            f"error: unknown suites {sorted(unknown)}; use atari, atari_generation, mujoco, maze",
            flush=True,
        )
        return 2
    load_before = os.getloadavg()
    payload: dict[str, Any] = {"benchmark": "e2e", "options": vars(args)}
    if "atari" in suites:
        payload["models"] = atari_suite(args, workers)
    if "atari_generation" in suites:
        payload["atari_generation"] = e2e_atari.generation_row(args)
        e2e_atari.print_generation(payload["atari_generation"], args)
        if args.first_call_new_process:
            payload["first_call_new_process_s"] = e2e_atari.first_call_new_process(args)
            print(f"first evaluate of a new process: {payload['first_call_new_process_s']} s")
    if "mujoco" in suites:
        payload["mujoco"] = e2e_rollout.mujoco_rows(args)
        e2e_rollout.print_mujoco(payload["mujoco"])
    if "maze" in suites:
        payload["maze"] = e2e_rollout.maze_row(args)
        e2e_rollout.print_maze(payload["maze"])
    load = {"before": load_before, "after": os.getloadavg()}
    print(f"\nload average (1, 5, 15 min) before {load['before']}, after {load['after']}")
    write_json(args.json, payload | {"load_average": load})
    return 0


def atari_suite(args: argparse.Namespace, workers: list[int]) -> list[dict[str, Any]]:
    """GA generations on Atari: floors, graph and per-step evaluators at each K, and the
    simulated accelerator (per-step path); prints the tables, returns the JSON payload."""
    from neuroevo.algorithms import make_algorithm
    from neuroevo.envs.atari import AtariEnv
    from neuroevo.genomes.noise import NoiseTable
    from neuroevo.models import make_model

    models = args.models.split(",")
    fractions = [float(f) for f in args.latency_fractions.split(",") if f]
    env = AtariEnv(args.game, args.slots)
    floor_rows, e2e_rows, latency_rows, payload = [], [], [], []
    for name in models:
        if name == "nature_valid":
            model = nature_valid(args.slots, env)
        else:
            model = make_model(name, args.slots, env.observation_spec, env.action_spec)
        noise = NoiseTable(seed=args.seed, size=2 * model.num_params + 1_000_000, cache_dir=False)
        ga = make_algorithm(
            "ga",
            num_params=model.num_params,
            scales=model.init_scales(),
            noise=noise,
            seed=args.seed,
            population_size=args.population,
            truncation=min(20, args.population),
            validation_candidates=0,
        )
        request, decode = ga.ask(), ga.decoder.decode_batch
        evaluated = len(request.genomes)  # the population minus the elite's slot (Algorithm 1)
        model.load(np.arange(args.slots, dtype=np.int32), decode(request.genomes[: args.slots]))
        before = measure_floor(env, model, args.seed)
        results = compare(
            env,
            model,
            request,
            decode,
            [(rollout, k, 0.0) for k in workers for rollout in ("graph", "step")],
            max_steps=args.max_steps,
            repeats=args.repeats,
        )
        after = measure_floor(env, model, args.seed + 1)
        env_fps = (before["env_frames_per_s"] + after["env_frames_per_s"]) / 2
        forwards = (before["forwards_per_s"] + after["forwards_per_s"]) / 2
        floor = 1.0 / (1.0 / env_fps + 1.0 / (FRAMES_PER_STEP * forwards))
        floor_rows.append([name, model.num_params, env_fps, forwards, floor])
        runs = {(rollout, k): run_summary(r) for (rollout, k, _), r in results.items()}
        sync = runs["step", workers[0]]["frames_per_s"]
        for (rollout, k), run in runs.items():
            fps = run["frames_per_s"]
            e2e_rows.append(
                [
                    name,
                    rollout,
                    k,
                    fps,
                    f"{100 * fps / floor:.0f}%",
                    f"{fps / runs['step', k]['frames_per_s']:.2f}",
                    f"{fps / sync:.2f}",
                    f"{run['python_calls_per_step']:.3f}",
                    f"{100 * run['net_hidden_share']:.0f}%",
                    split_text(run),
                ]
            )
        best = max(runs, key=lambda key: runs[key]["frames_per_s"])
        latency_runs = []
        if fractions and name == models[0]:
            # Latencies are fractions of the best per-step K's env step time per call (the
            # simulated device is a Python-side wait: per-step path only). The no-delay runs
            # are repeated alongside, so each ratio compares runs interleaved in time.
            step_runs = {k: runs["step", k] for k in workers}
            step_best = max(step_runs, key=lambda k: step_runs[k]["frames_per_s"])
            step_time = step_runs[step_best]["env_per_call_ms"] / 1e3
            latencies = [0.0] + [f * step_time for f in fractions]
            shown = sorted({workers[0], step_best})
            delayed = compare(
                env,
                model,
                request,
                decode,
                [("step", k, latency) for k in shown for latency in latencies],
                max_steps=args.max_steps,
                repeats=args.repeats,
            )
            for (_, k, latency), result in delayed.items():
                summary = run_summary(result)
                no_delay = run_summary(delayed["step", k, 0.0])
                ratio = summary["frames_per_s"] / no_delay["frames_per_s"]
                latency_runs.append({"workers": k, "latency_s": latency, "ratio": ratio} | summary)
                latency_rows.append(
                    [
                        name,
                        k,
                        f"{latency * 1e3:.2f}",
                        f"{latency / (no_delay['env_per_call_ms'] / 1e3):.2f}",
                        summary["frames_per_s"],
                        f"{ratio:.2f}",
                        f"{100 * summary['net_hidden_share']:.0f}%",
                        split_text(summary),
                    ]
                )
        payload.append(
            {
                "model": name,
                "num_params": model.num_params,
                "genomes_evaluated": evaluated,
                "floor_before": before,
                "floor_after": after,
                "floor_frames_per_s": floor,
                "best": list(best),
                "best_floor_share": runs[best]["frames_per_s"] / floor,
                "runs": {f"{rollout} K={k}": v for (rollout, k), v in runs.items()},
                "latency_runs": latency_runs,
            }
        )
    env.close()
    print_table(
        f"Floors ({args.game}, {args.slots} slots; mean of before and after the e2e runs)",
        ["model", "params", "env frames/s", "forwards/s", "floor frames/s"],
        floor_rows,
    )
    print_table(
        f"One GA generation ({evaluated} genomes evaluated: a population of "
        f"{args.population} keeps one slot for the elite; <= {args.max_steps} steps each, "
        f"median of {args.repeats}; graph = in-graph rollout, step = per-step evaluator)",
        [
            "model",
            "path",
            "K",
            "frames/s",
            "of floor",
            "vs step same K",
            "vs step K=1",
            "py calls/step",
            "net hidden",
            "per worker env/net/load/py/wait %",
        ],
        e2e_rows,
    )
    if latency_rows:
        print_table(
            "Simulated accelerator (one device, CPU-free) after every forward call (per-step)",
            [
                "model",
                "K",
                "latency ms",
                "/ env step",
                "frames/s",
                "vs no delay",
                "net hidden",
                "per worker env/net/load/py/wait %",
            ],
            latency_rows,
        )
    return payload
