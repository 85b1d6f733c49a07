"""``python -m benchmarks envs``: emulator frames/s of the env ops against their baselines.

Atari rows, all for one game and measured in one run:

* ``raw ALE loop``: one bare ``ALEInterface`` in C++ (``NeuroevoAtariRawLoop`` of the bench-only
  ``atari_bench`` op library: random action every 4 frames, no screen reads): the per-core
  ceiling of any Atari env.
* ``neuroevo op``: ``AtariEnv`` with N slots, driven by one ``tf.function`` whose
  ``tf.while_loop`` samples random actions, steps every slot, reads every observation and
  resets finished slots; TF's intra-op pool set to 1 or 2 threads (inter-op 1), so "threads"
  is the number of threads stepping emulators.
* ``gymnasium loop``: ``gymnasium.make("ALE/<Game>-v5", frameskip=1)`` wrapped in
  ``AtariPreprocessing`` + ``FrameStackObservation(4)``, stepped from Python: the same
  preprocessing on one core.
* ``AtariVectorEnv``: ale-py's C++ vector env with the same preprocessing (84x84 grayscale,
  max-pool, stack 4, frame skip 4, up to 30 no-ops, raw rewards, no FIRE reset), N envs,
  ``num_threads`` 1 or 2.

Frames are agent steps x frame skip for every row (reset and no-op frames are not counted).
Each row runs in its own subprocess (TensorFlow fixes its thread pools at start-up); the
processes are warmed up, then take turns, one at a time, for ``--repeats`` rounds so load
drifting on a shared machine spreads over all rows; the median is reported. A measurement
waits (up to ``--max-wait`` seconds) until other processes use at most ``--quiet-load``
cores (read from /proc/stat), and is retried if they used more while it ran; the foreign
load of every kept measurement is printed ("other load") and saved, and so are frames per
CPU-second, which such load distorts less.

Targets the run checks (for a 2-core machine): op >= 90% of the raw loop per thread, >= 1.7x
the gymnasium loop on one core, >= 1.0x AtariVectorEnv at equal threads and slots, 2 threads
>= 1.7x 1.

Other env families (MuJoCo) add a ``Family`` to ``FAMILIES``: their options, rows and table.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks import envs_mujoco
from benchmarks.common import (
    Child,
    RetryPolicy,
    add_retry_arguments,
    load_range,
    measure_quietly,
    paired_scaling,
    print_table,
    write_json,
)

__all__ = ["FAMILIES", "Family", "atari_rows", "main"]

TARGETS = {
    "op_vs_raw_per_thread": 0.90,
    "op_vs_gymnasium_one_core": 1.7,
    "op_vs_vector_env": 1.0,
    "op_two_vs_one_thread": 1.7,
}


@dataclasses.dataclass(frozen=True)
class Family:
    """One env family of the benchmark: its CLI options, its measurements and its report."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    rows: Callable[[argparse.Namespace], list[dict[str, Any]]]
    report: Callable[[list[dict[str, Any]]], dict[str, Any]]


# ------------------------------------------------------------------------------------ atari


def add_atari_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--game", default="pong", help="ale-py game id (default: pong)")
    parser.add_argument(
        "--frames",
        type=int,
        default=60_000,
        help="emulator frames per measurement and repeat (default: 60000)",
    )
    parser.add_argument(
        "--slots",
        type=int,
        nargs="+",
        default=[1, 8, 32],
        help="slot counts of the op (AtariVectorEnv uses those >= 8) (default: 1 8 32)",
    )
    parser.add_argument(
        "--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default: 1 2)"
    )
    add_retry_arguments(parser)


def _atari_plan(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(implementation, threads, slots) of every Atari row, in table order."""
    plan = [("raw ALE loop", 1, 1), ("gymnasium loop", 1, 1)]
    vector_slots = [n for n in args.slots if n >= 8] or [max(args.slots)]
    for slots in args.slots:
        for threads in args.threads:
            if slots == 1 and threads > 1:
                continue  # one slot cannot use a second thread
            plan.append(("neuroevo op", threads, slots))
    for slots in vector_slots:
        for threads in args.threads:
            plan.append(("AtariVectorEnv", threads, slots))
    return plan


def atari_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Measures every Atari row; one dict per row with ``frames_per_s`` (median) and ``rates``."""
    plan = _atari_plan(args)
    specs = [
        {"impl": impl, "threads": threads, "slots": slots, "game": args.game}
        for impl, threads, slots in plan
    ]
    retry = RetryPolicy.from_args(args)
    results = _measure_interleaved(specs, args.frames, args.repeats, retry)
    return [
        {"env": args.game, **spec, **result} for spec, result in zip(specs, results, strict=True)
    ]


def atari_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Prints the rows and the ratios against the targets; returns the ratios for the JSON.

    Wall-clock frames/s are what the targets are about. Frames per CPU-second are printed
    next to them: on a shared machine they show per-thread efficiency even when other load
    takes cores away (a lost core lowers wall-clock rates, not work per CPU-second).
    """
    rate = {(r["impl"], r["threads"], r["slots"]): r["frames_per_s"] for r in rows}
    cpu_rate = {(r["impl"], r["threads"], r["slots"]): r["frames_per_cpu_s"] for r in rows}
    rounds = {(r["impl"], r["threads"], r["slots"]): r["rates"] for r in rows}
    raw = rate[("raw ALE loop", 1, 1)]
    print_table(
        f"Atari ({rows[0]['env']}) emulator frames/s, median of interleaved repeats",
        [
            "impl",
            "threads",
            "slots",
            "frames/s",
            "min..max",
            "per thread / raw",
            "frames/CPU-s",
            "make s/slot",
            "other load",
        ],
        [
            [
                r["impl"],
                r["threads"],
                r["slots"],
                r["frames_per_s"],
                f"{min(r['rates']):,.0f}..{max(r['rates']):,.0f}",
                f"{r['frames_per_s'] / r['threads'] / raw:.2f}",
                r["frames_per_cpu_s"],
                f"{r['make_seconds'] / r['slots']:.3f}" if "make_seconds" in r else "",
                load_range(r.get("foreign_load", [])),
            ]
            for r in rows
        ],
    )
    one_thread = {n: v for (impl, t, n), v in rate.items() if impl == "neuroevo op" and t == 1}
    best = max(one_thread, key=one_thread.get)  # the slot count compared with raw and gym
    ratios = [
        {"target_name": key, "what": what, "ratio": ratio, "target": TARGETS[key]}
        for key, what, ratio in _atari_checks(rate, best, rounds)
    ]
    for r in ratios:
        r["ok"] = r["ratio"] >= r["target"]
    cpu_checks = _atari_checks(cpu_rate, best)
    print_table(
        "Atari ratios (measured in this run) against the targets",
        ["ratio", "wall clock", "target", "ok", "per CPU-second"],
        [
            [
                r["what"],
                f"{r['ratio']:.2f}",
                f">= {r['target']}",
                "yes" if r["ok"] else "NO",
                next((f"{c[2]:.2f}" for c in cpu_checks if c[1] == r["what"]), ""),
            ]
            for r in ratios
        ],
    )
    return {
        "ratios": ratios,
        "cpu_ratios": [{"target_name": k, "what": w, "ratio": v} for k, w, v in cpu_checks],
    }


def _atari_checks(
    rate: dict[tuple[str, int, int], float],
    best: int,
    rounds: dict[tuple[str, int, int], list[float]] | None = None,
) -> list[tuple[str, str, float]]:
    """(target name, description, ratio) for every comparison the targets ask for.

    ``best`` is the slot count of the 1-thread op row compared with the one-core baselines.
    Thread scaling, a wall-clock target, is checked when ``rounds`` (each row's wall-clock
    rate per round) is given: the median of per-round ratios (``paired_scaling``; the 1- and
    2-thread turns of a slot count run back to back).
    """
    raw = rate[("raw ALE loop", 1, 1)]
    gym = rate[("gymnasium loop", 1, 1)]
    op = {(t, n): v for (impl, t, n), v in rate.items() if impl == "neuroevo op"}
    vec = {(t, n): v for (impl, t, n), v in rate.items() if impl == "AtariVectorEnv"}
    one = {n: v for (t, n), v in op.items() if t == 1}
    checks = [
        ("op_vs_raw_per_thread", f"op 1 thread ({best} slots) / raw ALE loop", one[best] / raw),
        ("op_vs_gymnasium_one_core", f"op 1 thread ({best} slots) / gymnasium", one[best] / gym),
    ]
    for (t, n), v in sorted(vec.items()):
        if (t, n) in op:
            what = f"op / AtariVectorEnv, {t} thread(s), {n} slots"
            checks.append(("op_vs_vector_env", what, op[t, n] / v))
    for t, n in sorted(op):
        if t == 2 and (1, n) in op and rounds is not None:
            scaling = paired_scaling(rounds["neuroevo op", 1, n], rounds["neuroevo op", 2, n])
            checks.append(("op_two_vs_one_thread", f"op 2 / 1 threads, {n} slots", scaling))
    return checks


FAMILIES: dict[str, Family] = {
    "atari": Family(add_atari_arguments, atari_rows, atari_report),
    "mujoco": Family(envs_mujoco.add_arguments, envs_mujoco.mujoco_rows, envs_mujoco.mujoco_report),
}


# ------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks envs [--game pong] [--frames N] [--quick] [--json PATH]``."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks envs", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--families",
        nargs="+",
        default=sorted(FAMILIES),
        choices=sorted(FAMILIES),
        help="env families to measure (default: all)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (default: 3)")
    parser.add_argument(
        "--json", default="bench_results/envs.json", help="results file (default: %(default)s)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: few frames, 1 repeat, slots 1 and 8"
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # child process: a JSON row spec
    for family in FAMILIES.values():
        family.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.serve:
        _serve(json.loads(args.serve))
        return 0
    if args.quick:
        args.frames, args.repeats, args.slots = min(args.frames, 8_000), 1, [1, 8]
        args.max_wait = min(args.max_wait, 5.0)
    payload: dict[str, Any] = {"benchmark": "envs", "options": vars(args) | {"serve": None}}
    payload["load_average_before"] = os.getloadavg()
    for name in args.families:
        family = FAMILIES[name]
        rows = family.rows(args)
        payload[name] = {"rows": rows, **family.report(rows)}
    payload["load_average_after"] = os.getloadavg()
    write_json(args.json, payload)
    return 0


# ------------------------------------------------------------------------- child processes


def _measure_interleaved(
    specs: list[dict[str, Any]], frames: int, repeats: int, retry: RetryPolicy
) -> list[dict[str, Any]]:
    """Starts one warmed-up child per spec (one at a time), then runs them in turns.

    Around every measurement the parent reads the machine's busy CPU time (/proc/stat) and
    subtracts the child's own: the rest is foreign load (other users of a shared machine).
    Each attempt first waits for a quiet machine; a measurement taken under more than
    ``retry.quiet_load`` cores of foreign load is retried up to ``retry.max_retries`` times;
    the load is recorded either way.
    """
    with contextlib.ExitStack() as stack:
        children: list[Child] = []
        infos: list[dict[str, Any]] = []
        for spec in specs:
            child = Child("benchmarks.envs", [json.dumps(spec)])
            stack.callback(child.close)
            children.append(child)
            infos.append(json.loads(child.reply(f"starting {spec}")))
        samples: list[list[dict[str, float]]] = [[] for _ in specs]
        for _ in range(repeats):
            for i, (child, spec) in enumerate(zip(children, specs, strict=True)):
                measure = functools.partial(_run_child, child, spec, frames)
                (wall_rate, cpu_rate), foreign = measure_quietly(measure, retry)
                samples[i].append(
                    {"rate": wall_rate, "cpu_rate": cpu_rate, "foreign_load": foreign}
                )
    return [
        {
            "frames_per_s": statistics.median(x["rate"] for x in sample),
            "rates": [x["rate"] for x in sample],
            "frames_per_cpu_s": statistics.median(x["cpu_rate"] for x in sample),
            "foreign_load": [x["foreign_load"] for x in sample],
            **info,
        }
        for sample, info in zip(samples, infos, strict=True)
    ]


def _run_child(
    child: Child, spec: dict[str, Any], frames: int
) -> tuple[tuple[float, float], float]:
    """One measurement of a child: (frames/s, frames per CPU-second) and its CPU-seconds."""
    child.send(str(frames))
    wall_rate, cpu_rate, cpu = map(float, child.reply(f"measuring {spec}").split())
    return (wall_rate, cpu_rate), cpu


def _serve(spec: dict[str, Any]) -> None:
    """Child side: set up and warm up, print a JSON info line, then answer each frame budget."""
    runners = {
        "raw ALE loop": _raw_loop,
        "neuroevo op": _neuroevo_op,
        "gymnasium loop": _gymnasium_loop,
        "AtariVectorEnv": _vector_env,
    }
    run, info = runners[spec["impl"]](spec["game"], spec["threads"], spec["slots"])
    run(2_000)
    print(json.dumps(info), flush=True)
    for line in sys.stdin:
        cpu = time.process_time()
        frames, seconds = run(int(line))
        cpu = time.process_time() - cpu
        print(f"{frames / seconds} {frames / cpu} {cpu}", flush=True)


Runner = Callable[[int], tuple[int, float]]  # frame budget -> (frames, wall seconds)


def _raw_loop(game: str, threads: int, slots: int) -> tuple[Runner, dict[str, Any]]:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from neuroevo import ops
    from neuroevo.envs.atari import rom_path

    del threads, slots
    raw = ops.load("atari_bench").neuroevo_atari_raw_loop
    path = rom_path(game)

    def run(frames: int) -> tuple[int, float]:
        return frames, float(raw(game=game, rom_path=path, frames=frames))

    return run, {}


def _neuroevo_op(game: str, threads: int, slots: int) -> tuple[Runner, dict[str, Any]]:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from neuroevo.envs.atari import AtariEnv, rom_path

    rom_path(game)  # fail early on a bad game id, outside the timed creation
    start = time.perf_counter()
    env = AtariEnv(game, slots)
    make_seconds = time.perf_counter() - start
    indices = tf.range(slots)
    env.reset(indices, tf.range(slots, dtype=tf.int64))
    num_actions = env.action_spec.num_actions

    @tf.function(autograph=False)
    def steps_in_graph(iterations: tf.Tensor, first_seed: tf.Tensor) -> tf.Tensor:
        def body(i: tf.Tensor, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            actions = tf.random.uniform([slots], 0, num_actions, tf.int32)
            result = env.step(indices, actions)
            with tf.control_dependencies([result.reward]):
                obs = env.observation(indices)
            done = tf.boolean_mask(indices, result.terminated | result.truncated)
            with tf.control_dependencies([obs]):
                reset = env.reset(done, seed + tf.cast(done, tf.int64))
            with tf.control_dependencies([reset]):
                return i + 1, seed + slots

        return tf.while_loop(lambda i, _: i < iterations, body, (0, first_seed))[1]

    seed = tf.constant(slots, tf.int64)

    def run(frames: int) -> tuple[int, float]:
        nonlocal seed
        iterations = max(1, frames // (slots * env.frame_skip))
        begin = time.perf_counter()
        seed = steps_in_graph(tf.constant(iterations), seed)
        seed.numpy()
        return iterations * slots * env.frame_skip, time.perf_counter() - begin

    return run, {"make_seconds": make_seconds}


def _gymnasium_loop(game: str, threads: int, slots: int) -> tuple[Runner, dict[str, Any]]:
    import ale_py
    import gymnasium
    import numpy as np
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    del threads, slots
    gymnasium.register_envs(ale_py)
    name = "".join(part.capitalize() for part in game.split("_"))
    base = gymnasium.make(f"ALE/{name}-v5", frameskip=1, repeat_action_probability=0.0)
    env = FrameStackObservation(
        AtariPreprocessing(base, noop_max=30, frame_skip=4, screen_size=84), 4
    )
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    actions_n = int(env.action_space.n)

    def run(frames: int) -> tuple[int, float]:
        steps = max(1, frames // 4)
        actions = rng.integers(0, actions_n, steps)
        begin = time.perf_counter()
        for a in actions:
            _, _, terminated, truncated, _ = env.step(int(a))
            if terminated or truncated:
                env.reset()
        return steps * 4, time.perf_counter() - begin

    return run, {}


def _vector_env(game: str, threads: int, slots: int) -> tuple[Runner, dict[str, Any]]:
    import numpy as np
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv(
        game=game,
        num_envs=slots,
        num_threads=threads,
        repeat_action_probability=0.0,
        reward_clipping=False,
        use_fire_reset=False,
        noop_max=30,
        frameskip=4,
        stack_num=4,
        img_height=84,
        img_width=84,
        grayscale=True,
        maxpool=True,
    )
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions_n = int(env.single_action_space.n)

    def run(frames: int) -> tuple[int, float]:
        steps = max(1, frames // (slots * 4))
        actions = rng.integers(0, actions_n, (steps, slots))
        begin = time.perf_counter()
        for a in actions:
            env.step(a)
        return steps * slots * 4, time.perf_counter() - begin

    return run, {}


if __name__ == "__main__":
    sys.exit(main())
