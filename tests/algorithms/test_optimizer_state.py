"""Optimizer checkpoints through the generic State codec (neuroevo.algorithms.state_io):
checkpoints written by the former per-strategy code still load and continue exactly, and a
corrupt optimizer state is a ValueError naming the key, never a wrong run."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_algorithms import run, through_yaml_and_npz

from neuroevo.algorithms import GenerationSummary, Optimizer, make_algorithm
from neuroevo.algorithms.state_io import decode_state, encode_state
from neuroevo.genomes.genome import GAGenome, genome_from_dict
from neuroevo.genomes.noise import NoiseTable
from neuroevo.run import checkpoints as checkpoint

OLD = Path(__file__).resolve().parents[1] / "data" / "optimizer_checkpoints_v1"
"""Checkpoints the per-strategy (de)serialisation of main 905af76 wrote: each optimizer with
num_params 3, seed 9, population_size 16 (truncation 4 for the GAs), noise table seed 0 of
100,000 values, stopped after 5 tells (mid-generation where a generation has two phases);
``expected.yaml`` holds the summaries of the next 2 generations and the elite after them, as
that code computed them without stopping."""

FORMER = sorted(path.name for path in OLD.iterdir() if path.is_dir())
"""The optimizers that existed when the former format was written."""


@pytest.fixture(scope="module")
def noise() -> NoiseTable:
    return NoiseTable(seed=0, size=100_000, cache_dir=False)


def make(name: str, noise: NoiseTable) -> Optimizer:
    extra = {"truncation": 4} if name in ("ga", "ga_ns") else {}
    return make_algorithm(
        name, num_params=3, scales=1.0, noise=noise, seed=9, population_size=16, **extra
    )


@pytest.mark.parametrize("name", FORMER)
def test_checkpoint_of_the_former_format_resumes_exactly(name: str, noise: NoiseTable) -> None:
    _, state = checkpoint.latest_checkpoint(OLD / name)
    expected = yaml.safe_load((OLD / name / "expected.yaml").read_text())
    optimizer = make(name, noise)
    optimizer.load_state_dict(state["optimizer"])
    summaries = run(optimizer, generations=2)
    # The expected values were computed on another CPU: the ES gradient's float32 matrix
    # product sums in the order of this CPU's BLAS kernel, so its last bits may differ
    # (exact resume on one machine is test_algorithms' registry-wide test).
    for summary, row in zip(summaries, expected["summaries"], strict=True):
        got = summary.as_dict()
        assert got.keys() == row.keys()
        for key, value in row.items():
            assert got[key] == (value if value is None else pytest.approx(value, rel=1e-6)), key
    assert optimizer.elite == genome_from_dict(expected["elite"])
    np.testing.assert_allclose(
        optimizer.decoder.decode(optimizer.elite), np.float32(expected["elite_weights"]), rtol=1e-6
    )


@pytest.mark.parametrize("name", FORMER)
def test_state_dict_keeps_the_former_keys(name: str, noise: NoiseTable) -> None:
    """The generic codec writes the keys the per-strategy code wrote, so a checkpoint of
    either version loads into the other's optimizer."""
    _, state = checkpoint.latest_checkpoint(OLD / name)
    optimizer = make(name, noise)
    optimizer.load_state_dict(state["optimizer"])
    assert sorted(optimizer.state_dict()) == sorted(state["optimizer"])


def corrupt_cases(state: dict) -> list[tuple[str, dict, str]]:
    """(what, corrupted state, expected message) for a state of a GA mid-generation."""
    sigma = state["population.mutation_sigma"]
    return [
        ("dtype", state | {"fitness": state["fitness"].astype(np.int32)}, "'fitness' is int32"),
        ("genome dtype", state | {"population.mutation_sigma": sigma.astype(np.int64)}, "int64"),
        ("missing", {k: v for k, v in state.items() if k != "elite_score"}, "lacks 'elite_score'"),
        ("unknown key", state | {"spurious": 1}, "has keys spurious"),
        ("phase", state | {"phase": "sideways"}, "'phase' is 'sideways', not one of"),
        ("scalar type", state | {"generation": "two"}, "'generation' must be int"),
        ("null", state | {"generation": None}, "'generation' is null"),
        ("genomes", state | {"population.kind": np.array("xx")}, "'population' holds no valid"),
        ("array", state | {"fitness": [1.0, 2.0]}, "'fitness' must be an array"),
        ("summary", state | {"pending.best": "high"}, "'pending.best' must be float"),
    ]


def test_corrupt_state_is_a_value_error_naming_the_key(noise: NoiseTable) -> None:
    ga = make("ga", noise)
    run(ga, phases=3)  # mid-generation: pending summary, candidates
    state = through_yaml_and_npz(ga.state_dict())
    before = ga.state_dict()
    for what, corrupted, message in corrupt_cases(state):
        fresh = make("ga", noise)
        with pytest.raises(ValueError, match=message):
            fresh.load_state_dict(corrupted)
        assert fresh.generation == 0, what  # unchanged on failure
    assert sorted(ga.state_dict()) == sorted(before)


def test_shape_mismatch_names_the_config(noise: NoiseTable) -> None:
    _, state = checkpoint.latest_checkpoint(OLD / "ns_es")
    centers = state["optimizer"]["centers"]
    bad = state["optimizer"] | {"centers": np.vstack([centers, centers])}
    with pytest.raises(ValueError, match=r"'centers' is float32 \(\d+, 3\), this optimizer"):
        make("ns_es", noise).load_state_dict(bad)


def test_checkpoint_loader_reports_a_corrupt_state_as_invalid(
    tmp_path: Path, noise: NoiseTable
) -> None:
    """A checkpoint whose files are intact but whose optimizer state is not is skipped as
    invalid, naming the key, and the newest valid one is resumed instead."""
    shutil.copytree(OLD / "ga", tmp_path / "ga")
    _, state = checkpoint.latest_checkpoint(tmp_path / "ga")
    state["optimizer"].pop("population.init_index")
    checkpoint.save_checkpoint(tmp_path / "ga", 3, state, keep=2)
    optimizer, skipped = make("ga", noise), []
    found = checkpoint.latest_checkpoint(
        tmp_path / "ga",
        skipped,
        validate=lambda _path, s: optimizer.load_state_dict(s["optimizer"]),
    )
    assert found is not None and found[0] == 2
    assert skipped == [
        "ckpt-000003: optimizer checkpoint 'population' holds no valid genomes ('init_index')"
    ]
    assert optimizer.generation == 2


@dataclasses.dataclass(frozen=True)
class Toy:
    """Every supported field type once (a new strategy's State may use any of them)."""

    count: int
    scale: float | None
    name: str
    table: np.ndarray
    sizes: tuple[int, ...]
    summary: GenerationSummary | None = None


def test_codec_round_trips_every_field_type() -> None:
    rng = np.random.default_rng(7)
    summary = GenerationSummary(3, 1.0, 0.5, 0.25, None, 0.1, 0, 8, {"grad_norm": 2.0})
    toy = Toy(4, None, "x", rng.normal(size=(2, 3)), (1, 2), summary)
    data = through_yaml_and_npz(encode_state(toy))
    back = decode_state(Toy, data, toy)
    np.testing.assert_array_equal(back.table, toy.table)
    assert dataclasses.replace(back, table=toy.table) == toy
    bare = decode_state(Toy, through_yaml_and_npz(encode_state(Toy(1, 2.0, "", toy.table, ()))))
    assert bare.summary is None and bare.sizes == ()


def test_unsupported_field_type_is_refused_when_saved() -> None:
    @dataclasses.dataclass(frozen=True)
    class Bad:
        things: list

    with pytest.raises(TypeError, match="cannot checkpoint a field of type"):
        encode_state(Bad([1]))

    @dataclasses.dataclass(frozen=True)
    class Holes:
        cells: tuple[GAGenome | None, ...]

    with pytest.raises(TypeError, match="no None in a tuple"):
        encode_state(Holes((None,)))
