"""MuJoCo rows of ``python -m benchmarks envs``: env steps/s of the op and its baselines.

Measured side by side in one run, each implementation in its own process (TensorFlow fixes its
thread pools at start-up), all warmed up first and then run in turns, one at a time:

* ``neuroevo op``: ``MujocoEnv`` with ``--mujoco-slots`` slots driven by one ``tf.function``
  call running a ``tf.while_loop`` of [sample random actions, step, observe, reset the finished
  slots], with TF's intra-op pool set to 1 or 2 threads (and one inter-op thread).
* ``C++ loop``: one env of the op's own C++ class stepped in a plain C++ loop (random actions,
  observe, reset; ``NeuroevoMujocoRawLoop`` of the bench-only ``mujoco_bench`` op library,
  ``plain_cpp_loop``), no TensorFlow between steps: the per-core ceiling
  of the op, and the "plain C++ loop" the targets were derived from.
* ``C++ loop, 2 processes``: two such loops in two processes at once, their rates added: what
  two cores of this machine give when nothing is shared but the hardware. On a VM whose two
  vCPUs slow each other down (shared caches, a shared physical core, the host's clock
  limits), no 2-thread row can scale better than this one.
* ``gymnasium loop``: one ``gymnasium.make("<Task>-v5")`` env stepped from Python with random
  actions and reset when done, as a per-env Python evaluator does (one core).
* ``gymnasium loop, no timer``: the same with MuJoCo's profiling clock callback removed, as
  the op removes it (``import mujoco`` installs ``mjcb_time``, ~20% of a step): it shows how
  much of the op's lead is that callback and how much is Python.
* ``mujoco.batch``: the mujoco package's own batched stepping (``mujoco.batch.Batch``, clock
  callback removed), closed loop: write random controls, ``step(nstep=frame_skip)``, read
  qpos/qvel, reset fallen robots. It computes no rewards or derived observations: a floor on
  the cost of stepping rather than a complete env.

Like the Atari rows, every turn waits (up to ``--max-wait`` seconds) until other processes use
at most ``--quiet-load`` cores (read from /proc/stat) and is retried if they used more while it
ran; the foreign load of the kept turns is reported ("other load").

Targets the run checks: per core, the op >= 1.7x the gymnasium loop on Hopper and >= 1.25x on
Humanoid (physics dominates there), judged in env steps per CPU-second; op on 2 threads >= 1.8x
op on 1 thread, judged on the wall clock as the median of the per-round ratios (the two turns
of a round run back to back, so drift in the machine's speed cancels). Both kinds of rate are
reported for every row, and every 2-thread row also shows its scaling next to the
2-process C++ loop's.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks import common

__all__ = ["add_arguments", "main", "mujoco_report", "mujoco_rows", "plain_cpp_loop"]

TARGET_VS_GYMNASIUM = {"Hopper": 1.7, "Humanoid": 1.25}
TARGET_THREAD_SCALING = 1.8
CPP_LOOP = "C++ loop"
CPP_LOOP_PAIR = "C++ loop, 2 processes"
GYMNASIUM = "gymnasium loop"
GYMNASIUM_NO_TIMER = "gymnasium loop, no timer"
BATCH = "mujoco.batch"
OP = "neuroevo op"
# (implementation, threads) in table order.
MEASURED = (
    (GYMNASIUM, 1),
    (GYMNASIUM_NO_TIMER, 1),
    (CPP_LOOP, 1),
    (CPP_LOOP_PAIR, 2),
    (BATCH, 1),
    (BATCH, 2),
    (OP, 1),
    (OP, 2),
)
# Each 2-thread row and the 1-thread row its scaling is measured against.
SCALING_BASE = {CPP_LOOP_PAIR: CPP_LOOP, BATCH: BATCH, OP: OP}
# Robot height coordinate in qpos and its healthy range, for the mujoco.batch loop's resets.
_HEIGHT = {
    "Hopper": (1, 0.7, float("inf")),
    "Walker2d": (1, 0.8, 2.0),
    "HalfCheetah": (1, -float("inf"), float("inf")),
    "Ant": (2, 0.2, 1.0),
    "Humanoid": (2, 1.0, 2.0),
}
_DEFAULTS = {
    "mujoco_tasks": ["Hopper", "Humanoid"],
    "mujoco_slots": 64,
    "mujoco_seconds": 1.0,
    "repeats": 5,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the MuJoCo options (prefixed ``--mujoco-``) and ``--repeats`` if absent."""
    parser.add_argument(
        "--mujoco-tasks",
        nargs="+",
        default=_DEFAULTS["mujoco_tasks"],
        help="tasks to measure (default: Hopper Humanoid)",
    )
    parser.add_argument(
        "--mujoco-slots",
        type=int,
        default=_DEFAULTS["mujoco_slots"],
        help="slots of the op and simulations of mujoco.batch (default: %(default)s)",
    )
    parser.add_argument(
        "--mujoco-seconds",
        type=float,
        default=_DEFAULTS["mujoco_seconds"],
        help="approximate duration of one turn (default: %(default)s)",
    )
    common.add_retry_arguments(parser)
    if not any("--repeats" in action.option_strings for action in parser._actions):
        parser.add_argument(
            "--repeats",
            type=int,
            default=_DEFAULTS["repeats"],
            help="turns per implementation; the median is reported (default: %(default)s)",
        )


def mujoco_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Measures every (task, implementation, threads) and returns one dict per table row.

    Reads ``mujoco_tasks``, ``mujoco_slots``, ``mujoco_seconds`` and ``repeats`` from ``args``
    (defaults for missing ones). Each row has ``env``, ``impl``, ``threads``, ``slots``,
    ``steps_per_s`` (median of the turns), ``rates`` (every turn), ``steps_per_cpu_s`` (median
    env steps per CPU-second of the whole process, TF's own threads included) and the ratios
    to the gymnasium loop of the same task in the same run, ``vs_gymnasium`` (wall clock) and
    ``vs_gymnasium_per_cpu_s``, and to the plain C++ loop, ``vs_cpp_loop_per_cpu_s``.

    Every 2-thread row also has ``thread_scaling`` (median over rounds of its wall-clock rate
    over its 1-thread row's, the two measured back to back), ``cpu_efficiency`` (2-thread /
    1-thread steps per CPU-second: the scaling two free cores would give, divided by 2) and
    the op's and ``mujoco.batch``'s ``hardware_scaling``, the 2-process C++ loop's scaling in
    the same run.

    Targets: the per-core one is judged per CPU-second, which measures work per core even when
    other load on a shared machine takes cores away (wall-clock and CPU rates coincide on an
    idle machine); the thread scaling is judged on the wall clock, the only place a second core
    shows.
    """
    opts = {key: getattr(args, key, default) for key, default in _DEFAULTS.items()}
    retry = common.RetryPolicy.from_args(args)
    rows: list[dict[str, Any]] = []
    for task in opts["mujoco_tasks"]:
        measured = _measure_interleaved(task, opts, retry)
        task_rows = {
            key: {"env": f"{task}-v5", "impl": key[0], "threads": key[1], **result}
            for key, result in zip(MEASURED, measured, strict=True)
        }
        gym, cpp = task_rows[GYMNASIUM, 1], task_rows[CPP_LOOP, 1]
        for row in task_rows.values():
            row["vs_gymnasium"] = row["steps_per_s"] / gym["steps_per_s"]
            row["vs_gymnasium_per_cpu_s"] = row["steps_per_cpu_s"] / gym["steps_per_cpu_s"]
            row["vs_cpp_loop_per_cpu_s"] = row["steps_per_cpu_s"] / cpp["steps_per_cpu_s"]
        for two_threads, one_thread in SCALING_BASE.items():
            two, one = task_rows[two_threads, 2], task_rows[one_thread, 1]
            two["thread_scaling"] = common.paired_scaling(one["rates"], two["rates"])
            two["cpu_efficiency"] = two["steps_per_cpu_s"] / one["steps_per_cpu_s"]
        hardware = task_rows[CPP_LOOP_PAIR, 2]["thread_scaling"]
        for two_threads in (BATCH, OP):
            task_rows[two_threads, 2]["hardware_scaling"] = hardware
        op_one, op_two = task_rows[OP, 1], task_rows[OP, 2]
        if task in TARGET_VS_GYMNASIUM:
            op_one["target"] = TARGET_VS_GYMNASIUM[task]
            op_one["meets_target"] = op_one["vs_gymnasium_per_cpu_s"] >= op_one["target"]
        op_two["target"] = TARGET_THREAD_SCALING
        op_two["meets_target"] = op_two["thread_scaling"] >= TARGET_THREAD_SCALING
        rows.extend(task_rows.values())
    return rows


def mujoco_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Prints ``mujoco_rows`` output as a table; returns the targeted ratios for the JSON."""
    verdict = {True: "yes", False: "NO"}
    common.print_table(
        "MuJoCo env steps/s (median of interleaved turns; ratios measured in this run)",
        [
            "env",
            "impl",
            "threads",
            "steps/s",
            "min..max",
            "steps/CPU-s",
            "vs gym (wall)",
            "vs gym (CPU)",
            "vs C++ (CPU)",
            "1->2 thr (wall)",
            "2 procs",
            "target",
            "met",
            "other load",
        ],
        [
            [
                r["env"],
                r["impl"],
                r["threads"],
                r["steps_per_s"],
                f"{min(r['rates']):,.0f}..{max(r['rates']):,.0f}",
                r["steps_per_cpu_s"],
                f"{r['vs_gymnasium']:.2f}",
                f"{r['vs_gymnasium_per_cpu_s']:.2f}",
                f"{r['vs_cpp_loop_per_cpu_s']:.2f}",
                f"{r['thread_scaling']:.2f}" if "thread_scaling" in r else "",
                f"{r['hardware_scaling']:.2f}" if "hardware_scaling" in r else "",
                r.get("target", ""),
                verdict.get(r.get("meets_target"), ""),
                common.load_range(r["foreign_load"]),
            ]
            for r in rows
        ],
    )
    targets = []
    for r in rows:
        if "target" not in r:
            continue
        if "thread_scaling" in r:
            ratio, value = "op 2 threads / 1 thread, wall clock", r["thread_scaling"]
        else:
            ratio, value = "op 1 thread / gymnasium loop, per CPU-s", r["vs_gymnasium_per_cpu_s"]
        target = {"env": r["env"], "ratio": ratio, "value": value, "target": r["target"]}
        if "hardware_scaling" in r:
            target["hardware_scaling"] = r["hardware_scaling"]
        targets.append({**target, "met": r["meets_target"]})
    return {"targets": targets}


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.envs_mujoco [--mujoco-tasks ...] [--json PATH]``."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.envs_mujoco", description=__doc__.split("\n\n")[0]
    )
    add_arguments(parser)
    parser.add_argument(
        "--json",
        default="benchmarks/envs_mujoco.json",
        help="where to write the results (default: %(default)s)",
    )
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)  # IMPL TASK THREADS
    args = parser.parse_args(argv)
    opts = {key: getattr(args, key) for key in _DEFAULTS}
    if args.serve:  # a child process of _measure_interleaved
        impl, task, threads = args.serve
        _serve(impl, task, int(threads), opts)
        return 0
    rows = mujoco_rows(args)
    report = mujoco_report(rows)
    common.write_json(
        args.json, {"benchmark": "envs_mujoco", "options": opts, "rows": rows, **report}
    )
    return 0


# ------------------------------------------------------------------------------ measurements


def _measure_interleaved(
    task: str, opts: dict[str, Any], retry: common.RetryPolicy
) -> list[dict[str, Any]]:
    """Child processes per implementation, warmed up, then run in turns, one at a time.

    The machine is shared, so load drifts during a run; taking turns spreads the drift over
    every implementation instead of biasing whichever ran during a busy spell, and each turn
    waits for a quiet machine and is retried if other processes disturbed it (``retry``).
    """
    groups = [_start_children(impl, threads, task, opts) for impl, threads in MEASURED]
    rates: list[list[float]] = [[] for _ in groups]
    cpu_rates: list[list[float]] = [[] for _ in groups]
    loads: list[list[float | None]] = [[] for _ in groups]
    try:
        for group, (impl, _) in zip(groups, MEASURED, strict=True):
            for child in group:
                child.reply(f"starting {impl} on {task}")  # "ready" once warmed up
        for _ in range(opts["repeats"]):
            for group, (impl, _), group_rates, group_cpu_rates, group_loads in zip(
                groups, MEASURED, rates, cpu_rates, loads, strict=True
            ):
                measure = functools.partial(_run_children, group, f"measuring {impl} on {task}")
                (rate, cpu_rate), foreign = common.measure_quietly(measure, retry)
                group_rates.append(rate)
                group_cpu_rates.append(cpu_rate)
                group_loads.append(foreign)
    finally:
        for child in (child for group in groups for child in group):
            child.close()
    return [
        {
            "slots": opts["mujoco_slots"] if impl in (BATCH, OP) else 1,
            "steps_per_s": statistics.median(group_rates),
            "rates": group_rates,
            "steps_per_cpu_s": statistics.median(group_cpu_rates),
            "foreign_load": group_loads,
        }
        for group_rates, group_cpu_rates, group_loads, (impl, _) in zip(
            rates, cpu_rates, loads, MEASURED, strict=True
        )
    ]


def _start_children(impl: str, threads: int, task: str, opts: dict[str, Any]) -> list[common.Child]:
    """The processes of one row: two 1-thread C++ loops for CPP_LOOP_PAIR, else one."""
    if impl == CPP_LOOP_PAIR:
        impl, threads, processes = CPP_LOOP, 1, 2
    else:
        processes = 1
    args = [impl, task, str(threads), "--mujoco-slots", str(opts["mujoco_slots"])]
    args += ["--mujoco-seconds", str(opts["mujoco_seconds"])]
    return [common.Child("benchmarks.envs_mujoco", args) for _ in range(processes)]


def _run_children(group: list[common.Child], what: str) -> tuple[tuple[float, float], float]:
    """One turn of a row's processes, run at once: (steps/s, steps per CPU-s) and CPU-s.

    With several processes the rates add up (their turns overlap but for start-up skew of a
    few milliseconds) and steps per CPU-second is their total steps over their total CPU time.
    """
    for child in group:
        child.send("run")
    replies = [tuple(map(float, child.reply(what).split())) for child in group]
    steps = sum(cpu_rate * cpu for _, cpu_rate, cpu in replies)
    cpu = sum(cpu for _, _, cpu in replies)
    return (sum(rate for rate, _, _ in replies), steps / cpu), cpu


def _serve(impl: str, task: str, threads: int, opts: dict[str, Any]) -> None:
    """Child side: warm up, size one turn to ~mujoco_seconds, then answer each "run" line."""
    slots = opts["mujoco_slots"]
    if impl == OP:
        run = _neuroevo_op(task, threads, slots)
    elif impl == CPP_LOOP:
        run = _cpp_loop(task)
    elif impl == BATCH:
        run = _mujoco_batch(task, threads, slots)
    else:
        run = _gymnasium_loop(task, keep_timer=impl == GYMNASIUM)
    steps = max(100, int(_timed(run, 200)[0] * opts["mujoco_seconds"]))
    print("ready", flush=True)
    for _ in sys.stdin:
        print(*_timed(run, steps), flush=True)


def _timed(run: Callable[[int], int], steps: int) -> tuple[float, float, float]:
    """Env steps per wall-clock second and per CPU-second of this process, and its CPU-s."""
    wall, cpu = time.perf_counter(), time.process_time()
    done = run(steps)
    cpu = time.process_time() - cpu
    return done / (time.perf_counter() - wall), done / cpu, cpu


def _remove_mujoco_timer() -> None:
    """Clears ``mjcb_time``, the clock callback ``import mujoco`` installs (as the op does)."""
    import ctypes
    from pathlib import Path

    import mujoco

    library = next(Path(mujoco.__file__).parent.glob("libmujoco.so.*"))
    ctypes.c_void_p.in_dll(ctypes.CDLL(str(library)), "mjcb_time").value = None


def _gymnasium_loop(task: str, keep_timer: bool) -> Callable[[int], int]:
    import gymnasium
    import numpy as np

    env = gymnasium.make(f"{task}-v5")
    if not keep_timer:
        _remove_mujoco_timer()
    rng = np.random.default_rng(0)
    space = env.action_space
    env.reset(seed=0)

    def run(steps: int) -> int:
        actions = rng.uniform(space.low, space.high, (steps, *space.shape)).astype(np.float32)
        for action in actions:  # drawing them all at once costs ~1% of the loop
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        return steps

    return run


def _mujoco_batch(task: str, threads: int, slots: int) -> Callable[[int], int]:
    import gymnasium
    import mujoco
    import mujoco.batch
    import numpy as np

    from neuroevo.envs.mujoco import model_path

    frame_skip = gymnasium.make(f"{task}-v5").unwrapped.frame_skip
    _remove_mujoco_timer()
    model = mujoco.MjModel.from_xml_path(str(model_path(task)))
    batch = mujoco.batch.Batch(model, nsim=slots, nthread=threads)
    qpos, qvel, ctrl = batch.bind("qpos"), batch.bind("qvel"), batch.bind("ctrl")
    low, high = model.actuator_ctrlrange.T
    axis, z_low, z_high = _HEIGHT[task]
    rng = np.random.default_rng(0)
    batch.reset()

    def run(steps: int) -> int:
        iterations = max(1, steps // slots)
        for _ in range(iterations):
            ctrl[:] = rng.uniform(low, high, ctrl.shape)
            batch.step(nstep=frame_skip)
            # Read the state a policy would see (qpos without x, clipped qvel).
            state = np.concatenate([qpos[:, 1:], np.clip(qvel, -10, 10)], axis=1)
            height = state[:, axis - 1]
            fallen = np.flatnonzero((height <= z_low) | (height >= z_high))
            if fallen.size:
                batch.reset(fallen)
        return iterations * slots

    return run


def plain_cpp_loop(task: str, steps: int, seed: int = 0) -> float:
    """The C++ loop baseline: ``steps`` steps of one env of ``task`` in a plain C++ loop.

    The op's own environment class (task defaults, 1000-step episodes) with uniform random
    actions, an observation every step and a reset as each episode ends, seeded by ``seed``
    alone, with no TensorFlow between steps. It makes no ``MujocoEnv`` and touches none.

    Returns:
        The summed reward of all steps.
    """
    from neuroevo import ops
    from neuroevo.envs.mujoco import model_path, task_name

    name = task_name(task)
    raw_loop = ops.load("mujoco_bench").neuroevo_mujoco_raw_loop
    return float(raw_loop(steps, seed, task=name, xml_path=str(model_path(name))))


def replay_cpp_loop(
    task: str, seeds: Any, actions: Any, lengths: Any, lockstep: bool = False
) -> Any:
    """The C++ loop replaying recorded episodes of ``task`` on this thread.

    Episode ``i`` resets from ``seeds[i]`` (int64, as the env op's reset) and steps with
    ``actions[i, :lengths[i]]`` (float32 ``[n, max_steps, action_size]``), observing each step:
    the physics of exactly those episodes with no TensorFlow between steps. By default the
    episodes run one after another on one environment; ``lockstep`` runs them as a rollout
    worker runs its slots (one environment each, step t of every running episode before step
    t + 1 of any), which shows what the batched order itself costs.

    Returns:
        float64 ``[n]``: each episode's summed reward (its recorded return when the replay
        followed the same trajectory).
    """
    import numpy as np

    from neuroevo import ops
    from neuroevo.envs.mujoco import model_path, task_name

    name = task_name(task)
    replay = ops.load("mujoco_bench").neuroevo_mujoco_replay_loop
    returns = replay(
        np.asarray(seeds, np.int64),
        np.asarray(actions, np.float32),
        np.asarray(lengths, np.int32),
        task=name,
        xml_path=str(model_path(name)),
        lockstep=lockstep,
    )
    return returns.numpy()


def _cpp_loop(task: str) -> Callable[[int], int]:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    plain_cpp_loop(task, 1)  # build and load the library, load the model, outside the timing

    def run(steps: int) -> int:
        plain_cpp_loop(task, steps, seed=steps)
        return steps

    return run


def _neuroevo_op(task: str, threads: int, slots: int) -> Callable[[int], int]:
    import tensorflow as tf

    # Env ops split their slots over the intra-op pool (the calling thread included); one
    # inter-op thread runs the loop, so `threads` threads in all do physics.
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from neuroevo.envs.mujoco import MujocoEnv

    env = MujocoEnv(task, slots)
    indices = tf.range(slots)
    env.reset(indices, tf.range(slots, dtype=tf.int64))
    low = tf.constant(env.action_spec.low)
    high = tf.constant(env.action_spec.high)

    @tf.function(autograph=False)
    def steps_in_graph(iterations: tf.Tensor, first_seed: tf.Tensor) -> tf.Tensor:
        def body(i, seed):
            actions = low + (high - low) * tf.random.uniform([slots, low.shape[0]])
            result = env.step(indices, actions)
            with tf.control_dependencies([result.reward]):
                obs = env.observation(indices)
            done = tf.boolean_mask(indices, result.terminated | result.truncated)
            with tf.control_dependencies([obs]):
                env.reset(done, seed + tf.cast(done, tf.int64))
                return i + 1, seed + slots

        return tf.while_loop(lambda i, _: i < iterations, body, (0, first_seed))[1]

    seed = tf.constant(slots, tf.int64)

    def run(steps: int) -> int:
        nonlocal seed
        iterations = max(1, steps // slots)
        seed = steps_in_graph(tf.constant(iterations), seed)
        seed.numpy()
        return iterations * slots

    return run


if __name__ == "__main__":
    sys.exit(main())
