"""``python -m benchmarks distributed``: the Ray backend's overhead, traffic and scale.

In one run, on this machine:

* throughput: frames/s of one GA generation on Atari under the local ``Evaluator``, then under
  ``RayEvaluator`` on a local Ray cluster of one node (all cores, one actor) and of two nodes
  (``ray.cluster_utils.Cluster``, half the cores each, one actor per node); the local run is
  repeated between the Ray runs and their mean is the baseline (the machine's speed drifts).
  Also the driver's CPU time per generation, the bytes it put on the wire, and whether the
  returns and frames equal the local run's;
* traffic: bytes per generation for GA (seed chains of 1 and ``--chain-length`` mutations)
  and ES (perturbation ids plus one centre per node) at populations 1,000 and 10,000,
  computed from the serialized messages without running episodes;
* scale: ``cluster_sim.simulate_generation`` with 64-512 stand-in actors of one core each, whose
  episodes take the measured episode frames over the measured frames/s per core (resampled),
  10% of them 1.5x slower and 2% dying once mid-generation, and the measured driver CPU per
  chunk: the share of the cluster kept busy and the generation's tail.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cluster_sim import simulate_generation, wire_bytes
from benchmarks.common import print_table, write_json
from neuroevo.config.schema import load_config
from neuroevo.evaluation import EvalRequest, Evaluator
from neuroevo.evaluation.chunking import ChunkPolicy, ChunkQueue
from neuroevo.evaluation.ray import RayEvaluator
from neuroevo.genomes.genome import ESGenome, GAGenome
from neuroevo.run.assemble import NodeFactory

REPO = Path(__file__).resolve().parents[2]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks distributed", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--game", default="pong", help="Atari game (default pong)")
    parser.add_argument("--model", default="nature_small")
    parser.add_argument("--slots", type=int, default=16, help="env/network slots per actor")
    parser.add_argument("--population", type=int, default=32, help="GA genomes per generation")
    parser.add_argument("--max-steps", type=int, default=0, help="agent-step cutoff (0: none)")
    parser.add_argument("--repeats", type=int, default=1, help="generations per Ray setup")
    parser.add_argument("--chain-length", type=int, default=100, help="long GA seed chains")
    parser.add_argument("--actors", default="64,128,256,512", help="simulated actors")
    parser.add_argument("--sim-genomes", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="bench_results/distributed.json")
    return parser.parse_args(argv)


def ga_generation(population: int, seed: int, high: int, chain: int = 1) -> list[GAGenome]:
    """``population`` GA genomes of ``chain`` mutations, noise indices below ``high``."""
    rng = np.random.default_rng(seed)
    return [
        GAGenome(
            int(rng.integers(high)),
            tuple((int(rng.integers(high)), 0.005) for _ in range(chain)),
        )
        for _ in range(population)
    ]


def run_local(evaluator, genomes, seeds, max_steps) -> dict[str, Any]:
    results = evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=max_steps)
    return {
        "frames_per_s": results.stats.frames_per_s,
        "wall_s": results.stats.wall_s,
        "episode_frames": results.frames.reshape(-1).tolist(),
        "returns": results.returns.reshape(-1).tolist(),
    }


def run_ray(
    factory: NodeFactory, nodes: int, genomes, seeds, max_steps, repeats: int
) -> dict[str, Any]:
    """Generations on a fresh local cluster of ``nodes`` nodes sharing this machine's cores."""
    import ray
    from ray.cluster_utils import Cluster

    cores = os.cpu_count() or 2
    per_node = max(1, cores // nodes)
    temp = tempfile.mkdtemp(prefix="neuroevo-bench-ray-", dir="/tmp")
    os.environ["RAY_TMPDIR"] = temp
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": per_node})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=per_node)
    ray.init(address=cluster.address, runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        with RayEvaluator(factory) as evaluator:
            evaluator.evaluate(
                EvalRequest(genomes[:2], seeds[:2]), max_steps=20
            )  # build actors, trace graphs
            runs = [
                evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=max_steps)
                for _ in range(repeats)
            ]
            # The driver's cost per chunk: one-step episodes in chunks of one.
            evaluator.policy = ChunkPolicy(min_items=1, max_items=1)
            tiny = evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=1).stats
    finally:
        ray.shutdown()
        cluster.shutdown()
        del os.environ["RAY_TMPDIR"]
        shutil.rmtree(temp, ignore_errors=True)
    rates = [r.stats.frames_per_s for r in runs]
    stats = runs[-1].stats
    return {
        "nodes": nodes,
        "frames_per_s": float(np.median(rates)),
        "rates": rates,
        "driver_cpu_s": float(np.median([r.stats.driver_cpu_s for r in runs])),
        "driver_cpu_s_per_chunk": tiny.driver_cpu_s / tiny.chunks,
        "chunks": stats.chunks,
        "wire_bytes": stats.wire_bytes,
        "wall_s": stats.wall_s,
        "per_node_frames_per_s": [n.frames_per_s for n in stats.nodes],
        "per_node_idle_share": [n.idle_share for n in stats.nodes],
        "episode_frames": runs[-1].frames.reshape(-1).tolist(),
        "returns": runs[-1].returns.reshape(-1).tolist(),
    }


def traffic(num_params: int, chain: int, slots: int) -> list[dict[str, Any]]:
    """Wire bytes per generation, chunked as ``RayEvaluator`` would for 16 actors."""
    rows = []
    for population in (1_000, 10_000):
        queue, chunks = ChunkQueue(population, ChunkPolicy(min_items=slots)), 0
        while queue.take(16) is not None:
            chunks += 1
        cases = {
            "GA, 1 mutation": ga_generation(population, 0, 1 << 30, 1),
            f"GA, {chain} mutations": ga_generation(population, 0, 1 << 30, chain),
            "ES": [ESGenome(7, 1000 * k, 1 - 2 * (k % 2), 0.02) for k in range(population)],
        }
        for name, genomes in cases.items():
            wire = wire_bytes(genomes, 1, chunks, nodes=1, num_params=num_params)
            rows.append({"population": population, "genomes": name, "chunks": chunks, **wire})
    return rows


def scale(
    episode_s: np.ndarray, actors: list[int], genomes: int, driver_s: float, seed: int
) -> list[dict[str, Any]]:
    rows = []
    for count in actors:
        rng = np.random.default_rng(seed)
        item_s = rng.choice(episode_s, genomes)
        speed = np.where(rng.random(count) < 0.1, 1.5, 1.0)
        dying = rng.choice(count, max(1, count // 50), replace=False)
        deaths = {
            int(w): float(t) for w, t in zip(dying, rng.uniform(0, 1, dying.size), strict=True)
        }
        ideal = item_s.sum() / count
        deaths = {w: t * ideal for w, t in deaths.items()}
        result = simulate_generation(
            item_s, count, speed=speed, deaths=deaths, restart_s=30.0, driver_s_per_chunk=driver_s
        )
        rows.append({"actors": count, **result.__dict__, "ideal_s": ideal})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; prints tables and writes JSON."""
    args = parse_args([] if argv is None else argv)
    max_steps = args.max_steps or None
    cfg = load_config(
        None,
        [
            "env.kind=atari",
            f"env.id={args.game}",
            f"model.name={args.model}",
            f"noise.seed={args.seed}",
            f"noise.size={1 << 22}",
            "budget.generations=1",
        ],
    )
    factory = NodeFactory(cfg, args.slots)
    parts = factory()
    num_params = parts.model.num_params
    genomes = ga_generation(args.population, args.seed, cfg.noise.size - num_params)
    seeds = np.arange(args.population, dtype=np.int64).reshape(-1, 1) + 1000 * args.seed
    load_before = os.getloadavg()
    started = time.time()
    with Evaluator(parts.env, parts.model, parts.decoder.decode_batch) as evaluator:
        evaluator.evaluate(
            EvalRequest(genomes[:2], seeds[:2]), max_steps=20
        )  # trace graphs, as the Ray warm-up
        local = [run_local(evaluator, genomes, seeds, max_steps)]
        ray_runs = []
        for nodes in (1, 2):
            ray_runs.append(run_ray(factory, nodes, genomes, seeds, max_steps, args.repeats))
            local.append(run_local(evaluator, genomes, seeds, max_steps))
    local_fps = float(np.mean([r["frames_per_s"] for r in local]))
    rows = [["local", 1, local_fps, "1.00", "-", "-", "-", "-"]]
    for run in ray_runs:
        run["equal_to_local"] = all(
            run[key] == local[0][key] for key in ("returns", "episode_frames")
        )
        rows.append(
            [
                f"ray, {run['nodes']} node(s)",
                run["nodes"],
                run["frames_per_s"],
                f"{run['frames_per_s'] / local_fps:.2f}",
                f"{1000 * run['driver_cpu_s']:.0f}",
                run["chunks"],
                run["wire_bytes"],
                "yes" if run["equal_to_local"] else "NO",
            ]
        )
    columns = [
        "setup",
        "nodes",
        "frames/s",
        "vs local",
        "driver CPU ms",
        "chunks",
        "wire B",
        "results = local",
    ]
    print_table(
        f"GA generation, {args.population} genomes x 1 episode, {args.game}, {args.model}, "
        f"{args.slots} slots per actor",
        columns,
        rows,
    )
    wire = traffic(num_params, args.chain_length, args.slots)
    print_table(
        f"bytes on the wire per generation ({args.model}: {num_params:,} parameters, 1 node)",
        ["population", "genomes", "chunks", "sent", "received", "centre", "total"],
        [
            [
                w["population"],
                w["genomes"],
                w["chunks"],
                w["sent"],
                w["received"],
                w["shared"],
                w["total"],
            ]
            for w in wire
        ],
    )
    episode_frames = np.array([f for r in local for f in r["episode_frames"]], np.float64)
    per_core_fps = local_fps / (os.cpu_count() or 2)
    # Half per message: the measured cost covers sending a chunk and receiving its result.
    driver_per_chunk = min(r["driver_cpu_s_per_chunk"] for r in ray_runs) / 2
    actors = [int(a) for a in args.actors.split(",")]
    sims = scale(
        episode_frames / per_core_fps, actors, args.sim_genomes, driver_per_chunk, args.seed
    )
    print_table(
        f"simulated generation: {args.sim_genomes:,} episodes, 1-core actors, 10% 1.5x slow, "
        f"2% dying; episode times from {episode_frames.size} measured episodes at "
        f"{per_core_fps:,.0f} frames/s per core; driver {1000 * driver_per_chunk:.2f} ms per "
        "chunk sent or received",
        ["actors", "wall s", "ideal s", "busy", "tail s", "chunks", "requeued", "driver busy"],
        [
            [
                s["actors"],
                s["wall_s"],
                s["ideal_s"],
                f"{100 * s['busy_share']:.1f}%",
                s["tail_s"],
                s["chunks"],
                s["requeued"],
                f"{100 * s['driver_busy_share']:.1f}%",
            ]
            for s in sims
        ],
    )
    load = {"before": load_before, "after": os.getloadavg()}
    print(f"\nload average (1, 5, 15 min) before {load['before']}, after {load['after']}")
    print(f"benchmark took {time.time() - started:.0f} s")
    write_json(
        args.json,
        {
            "benchmark": "distributed",
            "options": vars(args),
            "load_average": load,
            "local": local,
            "local_frames_per_s": local_fps,
            "ray": ray_runs,
            "wire": wire,
            "num_params": num_params,
            "per_core_frames_per_s": per_core_fps,
            "driver_s_per_chunk": driver_per_chunk,
            "simulated": sims,
        },
    )
    return 0
