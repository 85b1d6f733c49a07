"""Sizes checked against the machine before a run builds anything (neuroevo.run.preflight)."""

from __future__ import annotations

import pytest

from neuroevo.config.schema import load_config
from neuroevo.core import resources
from neuroevo.genomes.noise import cache_path
from neuroevo.run import preflight
from neuroevo.run.preflight import BYTES_PER_EVALUATION, check_sizes

GIB = 1 << 30


def config(tmp_path, *overrides: str):
    return load_config(None, ["budget.generations=1", f"noise.cache_dir={tmp_path}", *overrides])


def test_a_generation_larger_than_memory_names_the_key_needed_and_available(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(resources, "available_memory_bytes", lambda: GIB)
    fits = GIB // BYTES_PER_EVALUATION // 2
    check_sizes(config(tmp_path, "algorithm.name=es", f"algorithm.es.population_size={fits}"))
    too_many = 2 * fits + 2  # 2 KiB over: the two amounts get the digits that tell them apart
    cfg = config(tmp_path, "algorithm.name=es", f"algorithm.es.population_size={too_many}")
    with pytest.raises(ValueError, match=r"needs 1\.000002 GiB of memory but only 1\.000000 GiB"):
        check_sizes(cfg)
    far = 4 * fits
    cfg = config(tmp_path, "algorithm.name=es", f"algorithm.es.population_size={far}")
    with pytest.raises(ValueError, match=r"needs 2\.0 GiB of memory but only 1\.0 GiB"):
        check_sizes(cfg)
    with pytest.raises(ValueError, match=r"lower algorithm\.ga\.population_size$"):
        check_sizes(config(tmp_path, f"algorithm.ga.population_size={too_many}"))


def test_the_noise_table_needs_disk_only_until_it_is_cached(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(resources, "free_disk_bytes", lambda path: 1000)
    cfg = config(tmp_path, "noise.size=1000")
    # 1000 float32 values and a 128-byte .npy header: 4128 bytes.
    message = r"noise.size = 1,000 floats\) needs 4.0 KiB of disk .* only 1000 B is free"
    with pytest.raises(ValueError, match=message):
        check_sizes(cfg)
    cache_path(cfg.noise.seed, cfg.noise.size, tmp_path).write_bytes(b"")
    check_sizes(cfg)
    assert sorted(p.name for p in tmp_path.iterdir()) == [cache_path(123, 1000).name]


def test_threads_beyond_the_process_limit_name_evaluator_workers(tmp_path, monkeypatch) -> None:
    """``ulimit -u`` (RLIMIT_NPROC, counted over the user's threads; not applied to root)."""
    import resource

    real = resources._soft_limit
    monkeypatch.setattr(
        resources,
        "_soft_limit",
        lambda which: 500 if which == resource.RLIMIT_NPROC else real(which),
    )
    monkeypatch.setattr(resources.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(resources, "_threads_of_user", lambda uid: 300)
    check_sizes(config(tmp_path, "evaluator.workers=4"))
    with pytest.raises(
        ValueError,
        match=r"^evaluator.workers = 200 needs [\d,]+ threads but the process limit \(ulimit -u\) "
        r"500 leaves 200 for this user; lower evaluator.workers",
    ):
        check_sizes(config(tmp_path, "evaluator.workers=200"))


def test_an_address_space_limit_counts_the_noise_table_and_thread_stacks(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(resources, "address_space_limit", lambda: 3 * GIB)
    monkeypatch.setattr(preflight, "thread_stack_bytes", lambda: 8 << 20)
    check_sizes(config(tmp_path, "noise.size=1000000", "evaluator.workers=2"))
    # 2 GiB for TensorFlow + 1.5 GiB of table.
    with pytest.raises(ValueError, match=r"needs 3\.5 GiB of address space .* only 3\.0 GiB"):
        check_sizes(config(tmp_path, f"noise.size={3 * GIB // 8}", "evaluator.workers=2"))
    # 2 GiB + the stacks of 2 x 98 threads more than the smallest run, 8 MiB each.
    with pytest.raises(ValueError, match=r"stacks of 196 more threads 1\.5 GiB"):
        check_sizes(config(tmp_path, "noise.size=1000000", "evaluator.workers=100"))
