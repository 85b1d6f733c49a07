"""Sizes checked against the machine before a run builds anything (neuroevo.preflight)."""

from __future__ import annotations

import pytest

from neuroevo import resources
from neuroevo.config import load_config
from neuroevo.noise import cache_path
from neuroevo.preflight import BYTES_PER_EVALUATION, check_sizes
from neuroevo.resources import format_bytes

GIB = 1 << 30


def config(tmp_path, *overrides: str):
    return load_config(None, ["budget.generations=1", f"noise.cache_dir={tmp_path}", *overrides])


def test_a_generation_larger_than_memory_names_the_key_needed_and_available(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(resources, "available_memory_bytes", lambda: GIB)
    fits = GIB // BYTES_PER_EVALUATION // 2
    check_sizes(config(tmp_path, "algorithm.name=es", f"algorithm.es.population_size={fits}"))
    too_many = 2 * fits + 2
    needed = format_bytes(too_many * BYTES_PER_EVALUATION)
    cfg = config(tmp_path, "algorithm.name=es", f"algorithm.es.population_size={too_many}")
    with pytest.raises(ValueError, match=rf"needs {needed} of memory but only 1.0 GiB"):
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
