"""Checks that a run's sizes fit the machine before anything is built, allocated or written.

The config checks each value on its own (ranges, relations between keys). What it cannot see
is whether a valid size fits this machine: a population of 1e12 is a valid integer but a
7 TiB allocation at the first ``ask``, a noise table of 1e14 floats is 364 TiB of disk. The
trainer calls :func:`check_sizes` first, so such a run is refused with one message naming the
key, what it needs and what is free, before any env, table or run directory exists.

Slot counts and episode caps have hard bounds (``neuroevo.indices.MAX_SLOTS``, 32-bit step
counters) that the config already enforces; :func:`check_model_sizes` checks the slots'
weights against memory and the noise table against the parameter count, once a one-slot model
has counted the parameters and before the env, model and table are built at full size.
"""

from __future__ import annotations

from neuroevo.config import Config
from neuroevo.noise import cache_path, file_bytes
from neuroevo.resources import check_disk, check_memory, check_writable

__all__ = ["BYTES_PER_EVALUATION", "check_model_sizes", "check_sizes"]

BYTES_PER_EVALUATION = 1024
"""Peak host memory of one genome-episode in ``ask`` + ``tell`` (seeds, genomes, returns,
shaping), rounded up from the largest measured (ES, about 830 bytes)."""


def check_sizes(cfg: Config) -> None:
    """Refuses a config whose generation or noise table does not fit memory or disk, or whose
    noise table would have to be written where nothing can be written.

    Raises:
        ValueError: naming the key to lower, the bytes needed and the bytes free.
    """
    name = cfg.algorithm.name
    params = cfg.algorithm.selected
    evaluations = params.population_size * params.population_episodes
    key = f"algorithm.{name}.population_size"
    check_memory(
        evaluations * BYTES_PER_EVALUATION,
        f"a generation of {evaluations:,} episodes ({key} x population_episodes)",
        f"lower {key}",
    )
    table = cache_path(cfg.noise.seed, cfg.noise.size, cfg.noise.cache_dir)
    if not table.exists():
        check_writable(
            table.parent,
            "the noise table",
            "point noise.cache_dir (or NEUROEVO_CACHE) at a writable directory",
        )
        check_disk(
            table.parent,
            file_bytes(cfg.noise.size),
            f"the noise table (noise.size = {cfg.noise.size:,} floats)",
            "lower noise.size or point noise.cache_dir at a larger disk",
        )


def check_model_sizes(cfg: Config, num_slots: int, num_params: int) -> None:
    """Refuses a noise table smaller than one parameter vector, and ``num_slots`` slots whose
    float32 weights (``num_params`` each) do not fit memory.

    Raises:
        ValueError: naming the key to change; for memory, what is needed and available.
    """
    if cfg.noise.size < num_params:
        raise ValueError(
            f"noise.size: {cfg.noise.size:,} is smaller than the {num_params:,} parameters of "
            f"{cfg.model.name}; every perturbation is a slice of the table, set noise.size >= "
            f"{num_params}"
        )
    check_memory(
        4 * num_slots * num_params,
        f"model storage for {num_slots:,} slots of {cfg.model.name} "
        f"({num_params:,} parameters each)",
        "lower evaluator.slots_per_worker or evaluator.workers",
    )
