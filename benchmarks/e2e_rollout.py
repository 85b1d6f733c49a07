"""The MuJoCo and maze rows of ``python -m benchmarks e2e``: the in-graph rollout against the
per-step evaluator and against the physics floor, measured side by side in one run.

* MuJoCo (Hopper, Humanoid): ES on a 2x64 tanh MLP, population = slots (32 and 256), one
  episode each (<= 1000 steps). Beside each evaluator: the op's own env class stepped in a plain
  C++ loop (``envs_mujoco.plain_cpp_loop``: random actions, observe, reset; no TensorFlow), on
  one thread (the per-core physics floor) and on two threads at once (the 2-thread physics
  loop, the ceiling of a 2-core evaluator). The evaluator rows report steps/s and their share
  of the 2-thread loop. Three ceilings run exactly the evaluated episodes (actions recorded
  step by step, returns checked to equal the evaluator's): the **replay** (plain C++, two
  threads, episodes one after another, steps balanced: the physics' best case), the
  **lockstep replay** (plain C++, each thread stepping its half of the slots in lockstep, as a
  rollout worker does) and the **bare TF loop** (the same halves in a ``tf.while_loop`` of env
  step, observation and forward pass, nothing else).
* Maze NS-ES: one generation of the ``maze_ns_es.yaml`` setup (hard maze, 64-64 tanh MLP, 200
  perturbations around 3 centres, 256 slots), the graph rollout (two workers, as the maze
  configs set, and one) against the per-step evaluator (one worker, its best), beside the floor
  of one worker: the env op (step + observation of the 200 robots) and the forward
  pass, each alone in a ``tf.while_loop`` of one episode's 400 iterations, their times added
  (one worker runs them one after the other; nothing is booked, refilled or returned).

Every round runs each setup in turn (a MuJoCo setup again and again for a second: a 32-slot
evaluation lasts ~70 ms); the tables give the medians of the rates and of the per-round ratios,
so a shared machine's drift hits all setups alike.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.common import print_table
from benchmarks.envs_mujoco import plain_cpp_loop, replay_cpp_loop

TARGETS_OF_PHYSICS = {32: 0.6, 256: 0.8}
"""Graph rollout's share of the 2-thread physics loop to reach, by slots."""
MAZE_TARGET = 3.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mujoco-tasks", default="Hopper,Humanoid")
    parser.add_argument("--mujoco-slots", default="32,256")
    parser.add_argument("--maze-population", type=int, default=200)


def _threads_seconds(targets: list[Callable[[], Any]]) -> float:
    """Wall seconds of running ``targets`` at once, one thread each."""
    threads = [threading.Thread(target=t) for t in targets]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def _physics(task: str, threads: int, steps: int) -> float:
    """Steps/s of ``threads`` plain C++ loops run at once (their steps added)."""
    loops = [functools.partial(plain_cpp_loop, task, steps, seed) for seed in range(threads)]
    return threads * steps / _threads_seconds(loops)


def _record_episodes(
    env: Any, model: Any, params: np.ndarray, seeds: np.ndarray, max_steps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Actions ``[n, max_steps, a]``, lengths and returns of one episode per slot (slot ``i``
    runs ``params[i]`` from ``seeds[i]``), played step by step with the env op and the model,
    outside any evaluator."""
    n = len(params)
    slots = np.arange(n, dtype=np.int32)
    model.load(slots, params)
    env.reset(slots, seeds)
    actions = np.zeros((n, max_steps, *env.action_spec.shape), np.float32)
    lengths = np.zeros(n, np.int32)
    returns = np.zeros(n)
    running = slots
    for t in range(max_steps):
        if not running.size:
            break
        chosen = model.act(running, env.observation(running)).numpy()
        result = env.step(running, chosen)
        actions[running, t] = chosen
        returns[running] += result.reward.numpy().astype(np.float64)
        lengths[running] += 1
        running = running[~(result.terminated.numpy() | result.truncated.numpy())]
    return actions, lengths, returns


def _replay(
    task: str,
    seeds: np.ndarray,
    actions: np.ndarray,
    lengths: np.ndarray,
    threads: int,
    lockstep: bool = False,
) -> Callable[[], float]:
    """Steps/s of ``threads`` plain C++ loops replaying the recorded episodes between them.

    By default each thread gets an equal share of the steps (longest episodes first) and plays
    its episodes one after another: the physics' best case. With ``lockstep`` each thread holds
    a contiguous block of the slots, as the rollout workers and the bare loop do, and steps them
    in lockstep: the same order without TensorFlow."""
    if lockstep:
        shares = np.array_split(np.arange(len(lengths)), threads)
    else:
        shares = [[] for _ in range(threads)]
        load = [0] * threads
        for episode in np.argsort(-lengths, kind="stable"):
            least = load.index(min(load))
            shares[least].append(int(episode))
            load[least] += int(lengths[episode])
    parts = [(seeds[s], actions[s], lengths[s]) for s in shares]

    def run() -> float:
        loops = [functools.partial(replay_cpp_loop, task, *p, lockstep=lockstep) for p in parts]
        return int(lengths.sum()) / _threads_seconds(loops)

    return run


def _bare_loop(
    env: Any, model: Any, params: np.ndarray, seeds: np.ndarray, steps: int, workers: int
) -> Callable[[], float]:
    """Steps/s of the bare TensorFlow loop: ``workers`` threads, each running its share of the
    slots (slot ``i`` runs ``params[i]`` from ``seeds[i]``) through env step, observation and
    forward pass in one ``tf.while_loop`` until all its episodes end; ``steps`` is their total."""
    import tensorflow as tf

    per_worker = len(params) // workers
    action_shape = tf.TensorShape([None, *env.action_spec.shape])

    @tf.function(autograph=False)
    def episodes(first: tf.Tensor) -> tf.Tensor:
        slots = first + tf.range(per_worker)
        with tf.control_dependencies([env.reset(slots, tf.gather(seeds, slots))]):
            actions = model.act(slots, env.observation(slots))

        def body(taken, running, actions):
            result = env.step(running, actions)
            running = tf.boolean_mask(running, ~(result.terminated | result.truncated))
            with tf.control_dependencies([result.reward]):
                obs = env.observation(running)
            return taken + tf.size(running), running, model.act(running, obs)

        taken, _, _ = tf.while_loop(
            lambda taken, running, actions: tf.size(running) > 0,
            body,
            (tf.size(slots), slots, actions),
            shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]), action_shape),
            parallel_iterations=1,
        )
        return taken

    def run() -> float:
        model.load(np.arange(len(params), dtype=np.int32), params)  # the evaluators load theirs
        taken: list[int] = []
        elapsed = _threads_seconds(
            [
                lambda w=w: taken.append(int(episodes(tf.constant(w * per_worker))))
                for w in range(workers)
            ]
        )
        if sum(taken) != steps:
            raise RuntimeError(f"the bare loop took {sum(taken)} steps, the episodes {steps}")
        return steps / elapsed

    run()  # trace outside the timing
    return run


def _rounds(
    setups: dict[str, Callable[[], float]], rounds: int, min_seconds: float = 0.0
) -> dict[str, list[float]]:
    """Each setup's rate per round, the setups run in turn within a round.

    A setup runs again until ``min_seconds`` have passed in the round (its rate is then that of
    all the runs together): a 32-slot evaluation lasts ~70 ms, too short to be timed once on a
    shared machine.
    """
    rates: dict[str, list[float]] = {name: [] for name in setups}
    for _ in range(rounds):
        for name, run in setups.items():
            runs = []
            start = time.perf_counter()
            while not runs or time.perf_counter() - start < min_seconds:
                runs.append(run())
            rates[name].append(statistics.harmonic_mean(runs))  # runs of the same work
    return rates


def _ratio(rates: dict[str, list[float]], a: str, b: str) -> float:
    return statistics.median(x / y for x, y in zip(rates[a], rates[b], strict=True))


def _es_population(decoder: Any, rng: np.random.Generator, size: int, centres: int) -> list:
    from neuroevo.genomes.genome import ESGenome

    for c in range(centres):
        centre = decoder.scales * rng.standard_normal(decoder.num_params).astype(np.float32)
        decoder.set_center(c, centre, keep=centres)
    genomes = []
    for i in range(size // 2):
        index = decoder.noise.sample_index(rng, decoder.num_params)
        genomes += [ESGenome(i % centres, index, s, 0.02) for s in (1, -1)]
    return genomes


def mujoco_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per task and slot count: physics floors, graph and per-step evaluator rates."""
    rows = []
    for task in args.mujoco_tasks.split(","):
        plain_cpp_loop(task, 1)  # build and load the bench library outside the timing
        for slots in (int(s) for s in args.mujoco_slots.split(",")):
            rows.append(_mujoco_row(args, task, slots))
    return rows


def _mujoco_row(args: argparse.Namespace, task: str, slots: int) -> dict[str, Any]:
    from neuroevo.envs.mujoco import MujocoEnv
    from neuroevo.evaluation import EvalRequest, Evaluator
    from neuroevo.genomes.genome import GenomeDecoder
    from neuroevo.genomes.noise import NoiseTable
    from neuroevo.models import make_model

    env = MujocoEnv(task, slots)
    model = make_model(
        "mlp",
        slots,
        env.observation_spec,
        env.action_spec,
        hidden_sizes=(64, 64),
        activation="tanh",
    )
    noise = NoiseTable(args.seed, size=model.num_params + 1_000_000, cache_dir=False)
    decoder = GenomeDecoder(noise, model.init_scales())
    rng = np.random.default_rng(args.seed)
    genomes = _es_population(decoder, rng, slots, 1)
    seeds = rng.integers(0, 2**62, (len(genomes), 1))
    request = EvalRequest(genomes, seeds)
    evaluators = {
        mode: Evaluator(env, model, decoder.decode_batch, workers=2, rollout=mode)
        for mode in ("graph", "step")
    }
    for evaluator in evaluators.values():  # graph instantiation outside the timing
        evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=5)
    physics_steps = 4000 if args.quick else 20000
    max_steps = 1000
    recorded = evaluators["graph"].evaluate(request, max_steps=max_steps).returns[:, 0]
    params = decoder.decode_batch(genomes)
    actions, lengths, returns = _record_episodes(env, model, params, seeds[:, 0], max_steps)
    replayed = replay_cpp_loop(task, seeds[:, 0], actions, lengths)
    in_lockstep = replay_cpp_loop(task, seeds[:, 0], actions, lengths, lockstep=True)
    if not all(np.array_equal(r, recorded) for r in (returns, replayed, in_lockstep)):
        raise RuntimeError(
            f"{task}: the recorded or replayed episodes' returns differ from the evaluator's; "
            "the replay floor would not measure the same episodes"
        )

    def evaluate(mode: str) -> Callable[[], float]:
        def run() -> float:
            results = evaluators[mode].evaluate(request, max_steps=max_steps)
            return results.stats.steps_per_s

        return run

    rates = _rounds(
        {
            "physics 1 thread": functools.partial(_physics, task, 1, physics_steps),
            "physics 2 threads": functools.partial(_physics, task, 2, physics_steps),
            "replay 2 threads": _replay(task, seeds[:, 0], actions, lengths, 2),
            "lockstep replay": _replay(task, seeds[:, 0], actions, lengths, 2, lockstep=True),
            "bare loop": _bare_loop(env, model, params, seeds[:, 0], int(lengths.sum()), 2),
            "graph": evaluate("graph"),
            "step": evaluate("step"),
        },
        args.repeats,
        min_seconds=0.2 if args.quick else 1.0,
    )
    for evaluator in evaluators.values():
        evaluator.close()
    env.close()
    return {
        "task": task,
        "slots": slots,
        "params": model.num_params,
        "rates": {k: statistics.median(v) for k, v in rates.items()},
        "graph_of_physics2": _ratio(rates, "graph", "physics 2 threads"),
        "step_of_physics2": _ratio(rates, "step", "physics 2 threads"),
        "replay_of_physics2": _ratio(rates, "replay 2 threads", "physics 2 threads"),
        "graph_of_replay2": _ratio(rates, "graph", "replay 2 threads"),
        "lockstep_of_physics2": _ratio(rates, "lockstep replay", "physics 2 threads"),
        "bare_of_lockstep": _ratio(rates, "bare loop", "lockstep replay"),
        "bare_of_physics2": _ratio(rates, "bare loop", "physics 2 threads"),
        "graph_of_bare": _ratio(rates, "graph", "bare loop"),
        "graph_vs_step": _ratio(rates, "graph", "step"),
        "target": TARGETS_OF_PHYSICS.get(slots),
    }


def print_mujoco(rows: list[dict[str, Any]]) -> None:
    table = []
    for r in rows:
        rates = r["rates"]
        target = r["target"]
        verdict = "" if target is None else ("yes" if r["graph_of_physics2"] >= target else "NO")
        table.append(
            [
                r["task"],
                r["slots"],
                rates["physics 1 thread"],
                rates["physics 2 threads"],
                rates["graph"],
                f"{100 * r['graph_of_physics2']:.0f}%",
                rates["step"],
                f"{100 * r['step_of_physics2']:.0f}%",
                f"{r['graph_vs_step']:.2f}",
                rates["replay 2 threads"],
                f"{100 * r['replay_of_physics2']:.0f}%",
                f"{100 * r['graph_of_replay2']:.0f}%",
                rates["lockstep replay"],
                f"{100 * r['lockstep_of_physics2']:.0f}%",
                rates["bare loop"],
                f"{100 * r['bare_of_physics2']:.0f}%",
                f"{100 * r['bare_of_lockstep']:.0f}%",
                f"{100 * r['graph_of_bare']:.0f}%",
                "" if target is None else f">= {100 * target:.0f}%: {verdict}",
            ]
        )
    print_table(
        "MuJoCo ES, 2x64 tanh MLP, population = slots, 2 workers (steps/s; medians of rounds)",
        [
            "task",
            "slots",
            "physics/core",
            "physics 2 thr",
            "graph",
            "of 2 thr",
            "per-step",
            "of 2 thr",
            "graph/step",
            "replay 2 thr",
            "of 2 thr",
            "graph of replay",
            "lockstep replay",
            "of 2 thr",
            "bare TF loop",
            "of 2 thr",
            "bare of lockstep",
            "graph of bare",
            "target",
        ],
        table,
    )


def maze_row(args: argparse.Namespace) -> dict[str, Any]:
    """One NS-ES generation on the hard maze: graph vs per-step evaluator."""
    from neuroevo.envs import make_env
    from neuroevo.evaluation import EvalRequest, Evaluator
    from neuroevo.genomes.genome import GenomeDecoder
    from neuroevo.genomes.noise import NoiseTable
    from neuroevo.models import make_model

    slots = 256
    env = make_env("maze", "hard", slots)
    model = make_model(
        "mlp",
        slots,
        env.observation_spec,
        env.action_spec,
        hidden_sizes=(64, 64),
        activation="tanh",
    )
    noise = NoiseTable(args.seed, size=model.num_params + 1_000_000, cache_dir=False)
    decoder = GenomeDecoder(noise, model.init_scales())
    rng = np.random.default_rng(args.seed)
    population = 40 if args.quick else args.maze_population
    genomes = _es_population(decoder, rng, population, 3)
    seeds = rng.integers(0, 2**62, (len(genomes), 1))
    request = EvalRequest(genomes, seeds)
    # Each path at its best: the graph rollout with two workers of 128 slots (the maze configs:
    # one worker's robots step while the other's networks run), the per-step path with one of
    # 256 (a second worker only adds GIL contention there); the graph rollout with one worker too.
    evaluators = {
        name: Evaluator(env, model, decoder.decode_batch, workers=workers, rollout=mode)
        for name, mode, workers in (
            ("graph", "graph", 2),
            ("graph 1", "graph", 1),
            ("step", "step", 1),
        )
    }
    for evaluator in evaluators.values():
        evaluator.evaluate(EvalRequest(genomes[:4], seeds[:4]), max_steps=5)

    def evaluate(name: str) -> Callable[[], float]:
        def run() -> float:
            return evaluators[name].evaluate(request).stats.steps_per_s

        return run

    setups = {name: evaluate(name) for name in evaluators}
    setups["floor"] = _maze_floor(env, model, population, rng)
    rates = _rounds(setups, args.repeats)
    for evaluator in evaluators.values():
        evaluator.close()
    env.close()
    return {
        "population": population,
        "rates": {k: statistics.median(v) for k, v in rates.items()},
        "graph_vs_step": _ratio(rates, "graph", "step"),
        "graph_of_floor": _ratio(rates, "graph", "floor"),
        "graph_1_of_floor": _ratio(rates, "graph 1", "floor"),
        "step_of_floor": _ratio(rates, "step", "floor"),
        "target": MAZE_TARGET,
    }


def _maze_floor(env: Any, model: Any, robots: int, rng: np.random.Generator) -> Callable[[], float]:
    """Steps/s of one worker's bare work on ``robots`` robots: the env loop's time (step with
    fixed random actions, observe) plus the forward loop's (every robot's network), one
    episode (400 iterations) each, measured apart."""
    import tensorflow as tf

    steps = 400
    indices = tf.range(robots)
    spec = env.action_spec
    actions = tf.constant(rng.uniform(spec.low, spec.high, (robots, *spec.shape)), spec.dtype)

    @tf.function(autograph=False)
    def env_loop(seeds):
        with tf.control_dependencies([env.reset(indices, seeds)]):
            obs = env.observation(indices)

        def body(i, obs):
            result = env.step(indices, actions)
            with tf.control_dependencies([result.reward]):
                return i + 1, env.observation(indices)

        return tf.while_loop(lambda i, _: i < steps, body, (0, obs), parallel_iterations=1)[1]

    @tf.function(autograph=False)
    def forward_loop(obs):
        def body(i, last):
            with tf.control_dependencies([last]):
                return i + 1, model.act(indices, obs)

        first = model.act(indices, obs)
        return tf.while_loop(lambda i, _: i < steps, body, (1, first), parallel_iterations=1)[1]

    seeds = tf.constant(rng.integers(0, 2**62, robots))
    obs = env_loop(seeds)  # traced, and observations to feed the forward loop
    forward_loop(obs).numpy()

    def run() -> float:
        start = time.perf_counter()
        env_loop(seeds).numpy()
        forward_loop(obs).numpy()
        return robots * steps / (time.perf_counter() - start)

    return run


def print_maze(row: dict[str, Any]) -> None:
    ratio = row["graph_vs_step"]
    rates = row["rates"]
    print_table(
        f"Maze NS-ES generation ({row['population']} genomes, hard maze, 64-64 tanh, 256 slots; "
        "steps/s; floor: one worker's env loop + forward loop, nothing else)",
        [
            "floor",
            "graph, 2 workers",
            "of floor",
            "graph, 1 worker",
            "of floor",
            "per-step, 1 worker",
            "of floor",
            "graph/step",
            "target",
        ],
        [
            [
                rates["floor"],
                rates["graph"],
                f"{100 * row['graph_of_floor']:.0f}%",
                rates["graph 1"],
                f"{100 * row['graph_1_of_floor']:.0f}%",
                rates["step"],
                f"{100 * row['step_of_floor']:.0f}%",
                f"{ratio:.2f}",
                f">= {MAZE_TARGET:.0f}x: {'yes' if ratio >= MAZE_TARGET else 'NO'}",
            ]
        ],
    )
