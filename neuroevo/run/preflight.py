"""Checks that a run's sizes fit the machine before anything is built, allocated or written.

The config checks each value on its own (ranges, relations between keys). What it cannot see
is whether a valid size fits this machine: a population of 1e12 is a valid integer but a
7 TiB allocation at the first ``ask``, a noise table of 1e14 floats is 364 TiB of disk. The
trainer calls :func:`check_sizes` first (``python -m neuroevo.train`` even before TensorFlow is
imported), so such a run is refused with one message naming the key, what it needs and what is
free, before any env, table or run directory exists. Covered: every request's episodes (the
population, validation, centre and test phases), the noise table (disk and address space),
the evaluator's threads (process and kernel limits, their stacks' address space) and the Ray
actors started on this machine.

Slot counts and episode caps have hard bounds (``neuroevo.core.indices.MAX_SLOTS``, 32-bit step
counters) that the config already enforces; :func:`check_model_sizes` checks the slots'
weights, the NS-ES meta-population's centres and the behaviour buffers against memory, and the
noise table against the parameter count, once a one-slot model has counted the parameters and
before the env, model and table are built at full size.
"""

from __future__ import annotations

import os

from neuroevo.config.schema import Config
from neuroevo.core.params import ParamError
from neuroevo.core.resources import (
    STARTUP_ADDRESS_SPACE,
    check_address_space,
    check_disk,
    check_memory,
    check_threads,
    check_writable,
    format_bytes,
    thread_stack_bytes,
)
from neuroevo.evaluation.behavior_params import BehaviorKind
from neuroevo.genomes.noise import cache_path, file_bytes

__all__ = [
    "BYTES_PER_EVALUATION",
    "check_episodes",
    "check_model_sizes",
    "check_sizes",
    "requests",
]

BYTES_PER_EVALUATION = 1024
"""Peak host memory of one genome-episode in ``ask`` + ``tell`` (seeds, genomes, returns,
shaping), rounded up from the largest measured (ES, about 830 bytes)."""

DEFAULT_WORKERS = 3
"""Most evaluator workers chosen automatically (``evaluation.evaluator.default_workers``)."""

BASE_THREADS = 64
"""Threads a process starts besides the evaluator's and TensorFlow's per-core pools (Python,
TensorFlow's runtime, the op libraries), rounded up."""

RAY_ACTOR_BYTES = 800 << 20
"""Resident memory of one Ray actor at least: a process with TensorFlow, the op libraries and
an env and model (a whole tiny training run peaks at 0.8 GiB resident, VmHWM)."""


def requests(cfg: Config) -> list[tuple[str, int, str]]:
    """``(key, episodes, what)`` of every evaluation request a run makes, by the key that
    sizes it: the population, validation, centre and test phases."""
    name = cfg.algorithm.name
    params = cfg.algorithm.selected
    section = f"algorithm.{name}"
    found = [
        (
            f"{section}.population_size",
            params.population_size * params.population_episodes,
            f"a generation ({section}.population_size x population_episodes)",
        )
    ]
    validation = getattr(params, "validation_candidates", 0) * getattr(
        params, "validation_episodes", 0
    )
    if validation:
        found.append(
            (
                f"{section}.validation_episodes",
                validation,
                f"the validation phase ({section}.validation_candidates x validation_episodes)",
            )
        )
    centres = getattr(params, "meta_population", 1)
    center = centres * getattr(params, "center_episodes", 0)
    if center:
        key = f"{section}.meta_population" if centres > 1 else f"{section}.center_episodes"
        found.append((key, center, f"the centre phase ({section}.center_episodes per centre)"))
    found.append(("test.episodes", cfg.test.episodes, "the paper's test (test.episodes)"))
    return found


def check_episodes(episodes: int, what: str, fix: str) -> None:
    """Refuses a request of ``episodes`` episodes whose bookkeeping does not fit memory.

    Raises:
        ValueError: naming ``what``, the bytes needed and available, and ``fix``.
    """
    check_memory(episodes * BYTES_PER_EVALUATION, f"{what} of {episodes:,} episodes", fix)


def _threads(cfg: Config) -> tuple[int, int]:
    """``(threads a run starts, threads beyond those of the smallest run)``."""
    workers = cfg.evaluator.workers or DEFAULT_WORKERS
    env_threads = getattr(cfg.env.options, "threads", 1)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # Per worker: its Python thread and the TensorFlow inter-op thread its calls hold.
    total = 2 * workers + env_threads + 2 * (cores or 1) + BASE_THREADS
    return total, max(0, 2 * (workers - 2) + env_threads - 1)


def check_sizes(cfg: Config) -> None:
    """Refuses a config whose requests, noise table, threads or Ray actors do not fit the
    machine's memory, disk, process limits or this process's address space, or whose noise
    table would have to be written where nothing can be written.

    Raises:
        ValueError: naming the key to lower, what is needed and what is free or allowed.
    """
    for key, episodes, what in requests(cfg):
        check_episodes(episodes, what, f"lower {key}")
    table = cache_path(cfg.noise.seed, cfg.noise.size, cfg.noise.cache_dir)
    table_bytes = file_bytes(cfg.noise.size)
    if not table.exists():
        check_writable(
            table.parent,
            "the noise table",
            "point noise.cache_dir (or NEUROEVO_CACHE) at a writable directory",
        )
        check_disk(
            table.parent,
            table_bytes,
            f"the noise table (noise.size = {cfg.noise.size:,} floats)",
            "lower noise.size or point noise.cache_dir at a larger disk",
        )
    threads, extra_threads = _threads(cfg)
    workers = cfg.evaluator.workers or DEFAULT_WORKERS
    check_threads(
        threads,
        f"evaluator.workers = {workers}",
        "lower evaluator.workers (each worker is a thread plus a TensorFlow thread)",
    )
    stacks = extra_threads * thread_stack_bytes()
    check_address_space(
        STARTUP_ADDRESS_SPACE + table_bytes + stacks,
        f"this run (TensorFlow {format_bytes(STARTUP_ADDRESS_SPACE)}, the noise table "
        f"{format_bytes(table_bytes)}, stacks of {extra_threads:,} more threads "
        f"{format_bytes(stacks)})",
        "lower noise.size or evaluator.workers, or raise the limit (ulimit -v)",
    )
    ray = cfg.evaluator.ray
    if cfg.evaluator.backend == "ray" and ray.address is None:  # actors on this machine
        check_memory(
            ray.workers_per_node * RAY_ACTOR_BYTES,
            f"{ray.workers_per_node:,} Ray actors on this machine (evaluator.ray."
            f"workers_per_node, each at least {format_bytes(RAY_ACTOR_BYTES)})",
            "lower evaluator.ray.workers_per_node",
        )


def check_model_sizes(
    cfg: Config, num_slots: int, num_params: int, behavior_values: int = 0
) -> None:
    """Refuses a noise table smaller than one parameter vector, an algorithm that cannot use
    behaviours of ``behavior_values`` values (per sample; a MAP-Elites grid of another
    dimension), and ``num_slots`` slots whose float32 weights (``num_params`` each), NS-ES
    centres or behaviour buffers do not fit memory or the address space.

    Raises:
        ValueError: naming the key to change; for memory, what is needed and available.
    """
    if cfg.noise.size < num_params:
        raise ValueError(
            f"noise.size: {cfg.noise.size:,} is smaller than the {num_params:,} parameters of "
            f"{cfg.model.name}; every perturbation is a slice of the table, set noise.size >= "
            f"{num_params}"
        )
    weights = 4 * num_slots * num_params
    check_memory(
        weights,
        f"model storage for {num_slots:,} slots of {cfg.model.name} "
        f"({num_params:,} parameters each)",
        "lower evaluator.slots_per_worker or evaluator.workers",
    )
    centres = getattr(cfg.algorithm.selected, "meta_population", 0)
    if centres:
        key = f"algorithm.{cfg.algorithm.name}.meta_population"
        # Each centre: its weights and the optimizer's two moment vectors, float32.
        check_memory(
            12 * centres * num_params,
            f"{centres:,} centres ({key}) of {num_params:,} parameters",
            f"lower {key}",
        )
    if behavior_values:
        samples = cfg.behavior.samples if cfg.behavior.kind is BehaviorKind.TRAJECTORY else 1
        try:
            cfg.algorithm.selected.check_behavior_values(samples * behavior_values)
        except ParamError as err:
            raise err.within(f"algorithm.{cfg.algorithm.name}") from None
        episodes = max(episodes for _, episodes, _ in requests(cfg))
        key = "behavior.samples" if samples > 1 else "the largest request"
        check_memory(
            8 * (num_slots + episodes) * samples * behavior_values,
            f"behaviour buffers ({samples:,} samples of {behavior_values:,} values for "
            f"{num_slots:,} slots and {episodes:,} episodes)",
            f"lower {key}",
        )
    _, extra_threads = _threads(cfg)
    table = file_bytes(cfg.noise.size)
    # The weights twice: a variable is made from a zero tensor of its size.
    check_address_space(
        STARTUP_ADDRESS_SPACE + table + extra_threads * thread_stack_bytes() + 2 * weights,
        f"this run (the noise table {format_bytes(table)}, model storage "
        f"{format_bytes(weights)} and its initial copy, TensorFlow and the threads)",
        "lower evaluator.slots_per_worker, evaluator.workers or noise.size, or raise the "
        "limit (ulimit -v)",
    )
