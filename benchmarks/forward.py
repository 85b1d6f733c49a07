"""``python -m benchmarks forward``: population forward pass against its baselines.

For each model and population size P, in one run on one machine:

* forwards/s of ``act`` with all P slots active (one observation per slot);
* the same networks as a Python loop of per-network calls (plain ``tf.nn.conv2d``/matmul, batch
  1, a pool of up to 32 distinct networks so each call reads its weights from memory);
* the weight-bytes floor: measured memory bandwidth / float32 weight bytes per network (a
  policy step must read every weight once);
* the cost of a step with 25% of the slots active relative to all active (weights read in
  place: should be ~25%; a gather copy of the active weights costs more);
* bfloat16 weights: forwards/s and the output error against float32, beside the most any
  bfloat16 step could reach on this machine: the measured time of the convolutions (whose
  float32 arithmetic bfloat16 storage does not shorten) plus the dense layers' bfloat16 bytes
  at the measured bandwidth.

Entries are timed in interleaved rounds, each started once other processes use <= 0.25 cores
(or after ``--max-wait`` s); the tables show each entry's best round (the machine may be
shared), the JSON keeps every round and the foreign load measured during it.

Targets the run checks: >= 3x the loop (2.5x for nature_large, whose loop is closer to the
memory floor), float32 >= 60% of the floor, 25%-active step <= 35% of the all-active step.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from benchmarks.common import (
    RetryPolicy,
    busy_cpu_seconds,
    median_rate,
    print_table,
    wait_for_quiet,
    write_json,
)
from neuroevo.envs.base import ActionSpec, ObservationSpec
from neuroevo.models import make_model
from neuroevo.models.layers import Conv2D, Dense, Flatten
from neuroevo.models.sequential import SequentialModel

TARGETS = {"speedup_vs_loop": 3.0, "fraction_of_floor": 0.60, "quarter_active_cost": 0.35}
LOOP_TARGET_BY_MODEL = {"nature_large": 2.5}
OBS_SPEC = ObservationSpec((84, 84, 4), tf.uint8)
ACTION_SPEC = ActionSpec(discrete=True, num_actions=18)
LOOP_POOL = 32
LOAD_CHUNK = 16
QUIET_CORES = 0.25  # other processes' load below which a round may start


class BandwidthProbe:
    """Memory read bandwidth: a float32 sum over a 1 GiB variable (far larger than any cache)."""

    def __init__(self, gib: float = 1.0):
        self.data = tf.Variable(tf.ones([int(gib * (1 << 30)) // 4]))
        self.bytes = int(self.data.shape[0]) * 4
        self.read_all = tf.function(lambda: tf.reduce_sum(self.data))

    def step(self) -> tf.Tensor:
        return self.read_all()


def random_params(model: SequentialModel, slots: np.ndarray, seed: int) -> np.ndarray:
    """Initial-distribution parameters for ``slots`` (float32 ``[len(slots), num_params]``)."""
    rng = np.random.default_rng([seed, int(slots[0])])
    noise = rng.standard_normal((len(slots), model.num_params), dtype=np.float32)
    return noise * model.init_scales()


def load_random(models: list[SequentialModel], seed: int) -> None:
    """Loads the same random parameters into every slot of each of ``models``."""
    num_slots = models[0].num_slots
    for start in range(0, num_slots, LOAD_CHUNK):
        slots = np.arange(start, min(start + LOAD_CHUNK, num_slots), dtype=np.int32)
        params = random_params(models[0], slots, seed)
        for model in models:
            model.load(slots, params)


class PerNetworkLoop:
    """The baseline: each network its own variables and a batch-1 call of plain TF ops."""

    def __init__(self, model: SequentialModel, count: int, seed: int):
        self.layers = model.layers
        self.networks = []
        for start in range(0, count, LOAD_CHUNK):
            slots = np.arange(start, min(start + LOAD_CHUNK, count), dtype=np.int32)
            for flat in random_params(model, slots, seed):
                parts = np.split(flat, np.cumsum([s.size for s in model.layout])[:-1])
                self.networks.append(
                    [
                        tf.Variable(p.reshape(s.shape))
                        for p, s in zip(parts, model.layout, strict=True)
                    ]
                )
        self.call = tf.function(self._network)

    def _network(self, obs: tf.Tensor, weights: list[tf.Variable]) -> tf.Tensor:
        x = tf.cast(obs, tf.float32) * (1.0 / 255.0)
        params = iter(weights)
        for layer in self.layers:
            if isinstance(layer, Conv2D):
                x = tf.nn.conv2d(x, next(params), layer.stride, layer.padding) + next(params)
            elif isinstance(layer, Dense):
                x = tf.linalg.matmul(x, next(params), transpose_b=True) + next(params)
            elif isinstance(layer, Flatten):
                x = tf.reshape(x, [1, -1])
            if layer.activation == "relu":
                x = tf.nn.relu(x)
        return tf.argmax(x, axis=-1, output_type=tf.int32)

    def step(self, obs: np.ndarray) -> tf.Tensor:
        actions = [
            self.call(obs[i : i + 1], self.networks[i % len(self.networks)])
            for i in range(len(obs))
        ]
        return actions[-1]


def convolutions(model: SequentialModel) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """The model's layers before its first dense layer, as one function of (indices, obs)."""
    stack = []
    for layer in model.layers:
        if isinstance(layer, Dense):
            break
        stack.append(layer)

    @tf.function
    def run(indices: tf.Tensor, obs: tf.Tensor) -> tf.Tensor:
        x = obs[:, None]
        for layer in stack:
            x = layer(indices, x)
        return x

    return run


def dense_weight_bytes(model: SequentialModel, kernel_bytes: int) -> int:
    """Bytes a step reads for the dense layers: kernels at ``kernel_bytes``, float32 biases."""
    total = 0
    for layer in model.layers:
        if isinstance(layer, Dense):
            total += kernel_bytes * int(np.prod(layer.kernel.shape[1:]))
            total += 4 * int(np.prod(layer.bias.shape[1:]))
    return total


def bf16_ceiling(conv_rate: float, bandwidth: float, dense_bf16_bytes: int) -> float:
    """Forwards/s of a bfloat16 step whose convolutions take as long as measured and whose
    dense layers stream their bfloat16 weights at the measured bandwidth."""
    return 1.0 / (1.0 / conv_rate + dense_bf16_bytes / bandwidth)


def interleaved_rates(
    steps: dict[str, tuple[Callable[[], Any], int]],
    repeats: int,
    min_seconds: float,
    max_wait: float,
) -> tuple[dict[str, list[float]], dict[str, list[float | None]]]:
    """Work/s of each ``(step, work per call)`` in each of ``repeats`` rounds.

    Each round waits (up to ``max_wait`` s) for the machine to be quiet, then times every
    entry in turn, so load that comes and goes falls on all entries alike and each entry's
    best round is its least disturbed one. The order rotates from round to round: the entry
    timed first after the idle wait runs slower (the threads and cores waking up; measured
    in docs/LAB-NOTEBOOK.md), and rotating lets every entry have rounds where it is not first.

    Returns:
        The rates, and the cores other processes used during each measurement (None where
        ``/proc/stat`` is unavailable).
    """
    calls = {}
    for key, (step, _) in steps.items():
        np.asarray(step())  # trace and warm up
        start = time.perf_counter()
        np.asarray(step())
        calls[key] = max(1, int(min_seconds / max(time.perf_counter() - start, 1e-6)))
    rates: dict[str, list[float]] = {key: [] for key in steps}
    foreign: dict[str, list[float | None]] = {key: [] for key in steps}
    keys = list(steps)
    for round_index in range(repeats):
        wait_for_quiet(RetryPolicy(quiet_load=QUIET_CORES, max_wait_seconds=max_wait))
        first = round_index % len(keys)
        for key in keys[first:] + keys[:first]:
            step, work = steps[key]

            def run(step=step, work=work, n=calls[key]) -> float:
                for _ in range(n):
                    out = step()
                np.asarray(out)
                return n * work

            busy, own, start = busy_cpu_seconds(), time.process_time(), time.perf_counter()
            rates[key].append(median_rate(run, 1)[0])
            if busy is None:
                foreign[key].append(None)
            else:
                others = busy_cpu_seconds() - busy - (time.process_time() - own)
                foreign[key].append(max(0.0, others) / (time.perf_counter() - start))
    return rates, foreign


def bench_model(
    name: str,
    slots: int,
    probe: BandwidthProbe,
    repeats: int,
    min_seconds: float,
    max_wait: float,
    gather: bool,
) -> dict[str, Any]:
    """All measurements of one model at one population size, interleaved."""
    rng = np.random.default_rng(slots)
    obs = rng.integers(0, 256, (slots, *OBS_SPEC.shape), dtype=np.uint8)
    everyone = tf.range(slots, dtype=tf.int32)
    quarter = tf.constant(np.sort(rng.choice(slots, max(1, slots // 4), replace=False)), tf.int32)
    obs_t, quarter_obs_t = tf.constant(obs), tf.constant(obs[: quarter.shape[0]])
    k = int(quarter.shape[0])

    fp32 = make_model(name, slots, OBS_SPEC, ACTION_SPEC)
    bf16 = make_model(name, slots, OBS_SPEC, ACTION_SPEC, dtype="bfloat16")
    models = [fp32, bf16]
    if gather:
        models.append(make_model(name, slots, OBS_SPEC, ACTION_SPEC, implementation="gather"))
    load_random(models, seed=1)
    loop = PerNetworkLoop(fp32, min(slots, LOOP_POOL), seed=2)
    convs = convolutions(fp32)

    steps: dict[str, tuple[Callable[[], Any], int]] = {
        "ours": (lambda: fp32.act(everyone, obs_t), slots),
        "ours_quarter": (lambda: fp32.act(quarter, quarter_obs_t), k),
        "bf16": (lambda: bf16.act(everyone, obs_t), slots),
        "convs": (lambda: convs(everyone, obs_t), slots),
        "loop": (lambda: loop.step(obs), slots),
        "bandwidth": (probe.step, probe.bytes),
    }
    if gather:
        copy = models[2]
        steps["gather"] = (lambda: copy.act(everyone, obs_t), slots)
        steps["gather_quarter"] = (lambda: copy.act(quarter, quarter_obs_t), k)
    samples, foreign = interleaved_rates(steps, repeats, min_seconds, max_wait)
    rates = {key: max(values) for key, values in samples.items()}

    reference = fp32.forward(everyone, obs_t).numpy()
    rounded = bf16.forward(everyone, obs_t).numpy()
    weight_bytes = 4 * fp32.num_params
    floor = rates["bandwidth"] / weight_bytes
    dense_bf16_bytes = dense_weight_bytes(fp32, kernel_bytes=2)
    ceilings = [
        bf16_ceiling(c, b, dense_bf16_bytes) / f
        for c, b, f in zip(samples["convs"], samples["bandwidth"], samples["ours"], strict=True)
    ]
    row: dict[str, Any] = {
        "model": name,
        "slots": slots,
        "num_params": fp32.num_params,
        "weight_bytes": weight_bytes,
        "bandwidth_bytes_per_s": rates["bandwidth"],
        "forwards_per_s": rates["ours"],
        "loop_forwards_per_s": rates["loop"],
        "floor_forwards_per_s": floor,
        "speedup_vs_loop": rates["ours"] / rates["loop"],
        "fraction_of_floor": rates["ours"] / floor,
        # Cost of a step = k / rate: the 25%-active step relative to the all-active one.
        "quarter_active_cost": (k / rates["ours_quarter"]) / (slots / rates["ours"]),
        "bf16_forwards_per_s": rates["bf16"],
        "bf16_speedup_vs_loop": rates["bf16"] / rates["loop"],
        "bf16_fraction_of_floor": rates["bf16"] / (2 * floor),
        "bf16_rel_error": float(np.abs(rounded - reference).max() / np.abs(reference).max()),
        "bf16_argmax_agreement": float(np.mean(rounded.argmax(-1) == reference.argmax(-1))),
        "bf16_speedup_median": statistics.median(
            b / f for b, f in zip(samples["bf16"], samples["ours"], strict=True)
        ),
        "convolutions_per_s": rates["convs"],
        "bf16_ceiling_forwards_per_s": bf16_ceiling(
            rates["convs"], rates["bandwidth"], dense_bf16_bytes
        ),
        "bf16_ceiling_speedup_median": statistics.median(ceilings),
    }
    row["samples_per_s"] = samples
    row["foreign_cores"] = foreign
    loads = [v for values in foreign.values() for v in values if v is not None]
    row["median_foreign_cores"] = statistics.median(loads) if loads else None
    if gather:
        row["gather_forwards_per_s"] = rates["gather"]
        row["gather_quarter_active_cost"] = (k / rates["gather_quarter"]) / (
            slots / rates["gather"]
        )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks forward", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--models", nargs="+", default=["nature_large", "nature_small"])
    parser.add_argument("--slots", nargs="+", type=int, default=[16, 64, 256])
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed rounds; tables report each entry's best"
    )
    parser.add_argument("--json", default="bench_results/forward.json")
    parser.add_argument(
        "--quick", action="store_true", help="P=16 only, 1 repeat, short timings (a smoke run)"
    )
    parser.add_argument(
        "--max-wait",
        type=float,
        default=20.0,
        help="seconds to wait, before each round, for other processes to go quiet",
    )
    parser.add_argument(
        "--gather-at",
        type=int,
        default=64,
        help="also time the gather formulation at this P (0: never)",
    )
    args = parser.parse_args(argv)
    slots = [16] if args.quick else args.slots
    repeats = 1 if args.quick else args.repeats
    min_seconds = 0.2 if args.quick else 0.5
    if args.quick:
        args.max_wait = min(args.max_wait, 2.0)

    probe = BandwidthProbe()
    rows = []
    for name in args.models:
        for p in slots:
            print(f"  {name} P={p} ...", flush=True)
            rows.append(
                bench_model(
                    name, p, probe, repeats, min_seconds, args.max_wait, p == args.gather_at
                )
            )

    print_table(
        "Population forward pass, float32 (forwards/s; floor = bandwidth / weight bytes)",
        [
            "model",
            "P",
            "ours",
            "loop",
            "x loop",
            "GB/s",
            "floor",
            "% floor",
            "25% cost",
            "gather",
            "gather 25%",
            "other load",
        ],
        [
            [
                r["model"],
                r["slots"],
                r["forwards_per_s"],
                r["loop_forwards_per_s"],
                r["speedup_vs_loop"],
                r["bandwidth_bytes_per_s"] / 1e9,
                r["floor_forwards_per_s"],
                f"{100 * r['fraction_of_floor']:.0f}%",
                f"{100 * r['quarter_active_cost']:.0f}%",
                r.get("gather_forwards_per_s", "-"),
                f"{100 * r['gather_quarter_active_cost']:.0f}%"
                if "gather_forwards_per_s" in r
                else "-",
                "-" if r["median_foreign_cores"] is None else f"{r['median_foreign_cores']:.2f}",
            ]
            for r in rows
        ],
    )
    print_table(
        "bfloat16 weights (float32 accumulation; ceiling = the convolutions as measured plus "
        "the dense layers' bf16 bytes at the measured bandwidth)",
        [
            "model",
            "P",
            "bf16 fwd/s",
            "x fp32",
            "x fp32 (median)",
            "ceiling x fp32 (median)",
            "convs % of fp32",
            "x loop",
            "% bf16 floor",
            "rel. error",
            "argmax agree",
        ],
        [
            [
                r["model"],
                r["slots"],
                r["bf16_forwards_per_s"],
                r["bf16_forwards_per_s"] / r["forwards_per_s"],
                r["bf16_speedup_median"],
                r["bf16_ceiling_speedup_median"],
                f"{100 * r['forwards_per_s'] / r['convolutions_per_s']:.0f}%",
                r["bf16_speedup_vs_loop"],
                f"{100 * r['bf16_fraction_of_floor']:.0f}%",
                f"{r['bf16_rel_error']:.1e}",
                f"{100 * r['bf16_argmax_agreement']:.0f}%",
            ]
            for r in rows
        ],
    )

    def meets(row: dict, key: str, target: float) -> bool:
        if key == "quarter_active_cost":
            return row[key] <= target
        if key == "speedup_vs_loop":
            target = LOOP_TARGET_BY_MODEL.get(row["model"], target)
        return row[key] >= target

    checks = {key: all(meets(r, key, target) for r in rows) for key, target in TARGETS.items()}
    print("\ntargets: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in checks.items()))
    write_json(
        args.json,
        {
            "benchmark": "forward",
            "targets": {**TARGETS, "speedup_vs_loop_by_model": LOOP_TARGET_BY_MODEL},
            "targets_met": checks,
            "results": rows,
            "median_speedup_vs_loop": statistics.median(r["speedup_vs_loop"] for r in rows),
        },
    )
    return 0
