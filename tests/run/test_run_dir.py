"""Tests of neuroevo.run.run_dir: run directory rules, metrics CSV, elite file, progress line."""

import csv
import errno
from pathlib import Path

import numpy as np
import pytest

from neuroevo.config.schema import apply_overrides, load_config
from neuroevo.core.files import atomic_write, temp_path
from neuroevo.run.run_dir import MetricsWriter, RunDir, RunDirError, first_missing_generation


@pytest.fixture
def cfg():
    return load_config(None, ["budget.generations=5", "algorithm.ga.population_size=50"])


def read_rows(path):
    with open(path, newline="") as file:
        return list(csv.reader(file))


def test_create_new_run_and_resume_rules(tmp_path, cfg):
    run = RunDir(tmp_path / "runs" / "a")
    with pytest.raises(RunDirError, match="holds no run"):
        run.check(cfg, resume=True)
    run.check(cfg)
    run.create(cfg)
    assert load_config(run.config_path) == cfg
    with pytest.raises(RunDirError, match="already holds a run"):
        run.check(cfg)
    run.check(cfg, resume=True)
    longer = apply_overrides(cfg, ["budget.generations=50", "logging.progress=false"])
    run.check(longer, resume=True)
    run.create(longer, resume=True)
    assert load_config(run.config_path) == longer
    other = apply_overrides(cfg, ["algorithm.ga.population_size=60", "env.id=frostbite"])
    with pytest.raises(RunDirError, match=r"algorithm\.ga\.population_size, env\.id"):
        run.check(other, resume=True)
    assert load_config(run.config_path) == longer


def test_one_claim_at_a_time_released_on_close(tmp_path, cfg):
    first, second = RunDir(tmp_path / "run"), RunDir(tmp_path / "run")
    first.create(cfg)
    first.claim()
    first.claim()  # a second claim by the holder is a no-op
    with pytest.raises(RunDirError, match="in use by a trainer of this process; close it"):
        second.claim()
    first.release()
    second.claim()
    second.release()
    second.release()
    dropped = RunDir(tmp_path / "run")
    dropped.claim()
    del dropped  # a trainer dropped without close frees the directory too
    first.claim()


def test_refuses_a_non_empty_directory_that_is_not_a_run(tmp_path, cfg):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="holds files but no run"):
        RunDir(tmp_path).check(cfg)
    empty = tmp_path / "empty"
    empty.mkdir()
    RunDir(empty).check(cfg)


def test_metrics_header_once_and_stable_columns(tmp_path):
    writer = MetricsWriter(tmp_path / "metrics.csv")
    writer.write({"generation": 0, "frames": 100, "best": np.float32(1.5), "time_eval_s": 0.25})
    writer.write({"generation": 1, "frames": 250, "best": 2.0})
    with pytest.raises(ValueError, match=r"\['median'\] are not in metrics.csv"):
        writer.write({"generation": 2, "median": 3.0})
    with pytest.raises(ValueError, match="needs a 'generation' column"):
        writer.write({"frames": 1})
    with pytest.raises(TypeError, match="metric 'best' must be a scalar"):
        writer.write({"generation": 2, "best": [1.0]})
    assert read_rows(tmp_path / "metrics.csv") == [
        ["generation", "frames", "best", "time_eval_s"],
        ["0", "100", "1.5", "0.25"],
        ["1", "250", "2.0", ""],
    ]
    # A new run (no resume) starts the file again.
    MetricsWriter(tmp_path / "metrics.csv").write({"generation": 0, "x": 1})
    assert read_rows(tmp_path / "metrics.csv") == [["generation", "x"], ["0", "1"]]


def test_resume_drops_rows_after_the_checkpoint(tmp_path, rng):
    path = tmp_path / "metrics.csv"
    writer = MetricsWriter(path)
    scores = rng.normal(size=10)
    for generation, score in enumerate(scores):
        writer.write({"generation": generation, "best": float(score)})
    with open(path, "a") as file:
        file.write("10,0.12")  # a row cut short by a crash
    checkpoint = int(rng.integers(0, 10))
    resumed = MetricsWriter(path, resume_generation=checkpoint)
    assert resumed.columns == ["generation", "best"]
    resumed.write({"generation": checkpoint + 1, "best": 99.0})
    rows = read_rows(path)
    assert rows[0] == ["generation", "best"]
    assert [int(r[0]) for r in rows[1:]] == [*range(checkpoint + 1), checkpoint + 1]
    assert [float(r[1]) for r in rows[1 : checkpoint + 2]] == scores[: checkpoint + 1].tolist()
    assert MetricsWriter(tmp_path / "absent.csv", resume_generation=3).columns is None


def test_elite_round_trip(tmp_path, rng):
    run = RunDir(tmp_path)
    with pytest.raises(FileNotFoundError, match="no elite saved yet"):
        run.load_elite()
    weights = rng.normal(size=1000).astype(np.float32)
    genome = {"init_seed": np.int64(7), "mutations": ((3, 0.002), (11, 0.002)), "score": 21.0}
    run.save_elite(genome, weights)
    run.save_elite(genome, weights)  # replacing is atomic and leaves no temp file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elite.npz"]
    loaded_genome, loaded_weights = run.load_elite()
    assert loaded_genome == {"init_seed": 7, "mutations": [[3, 0.002], [11, 0.002]], "score": 21.0}
    assert loaded_weights.dtype == np.float32
    np.testing.assert_array_equal(loaded_weights, weights)
    with pytest.raises(TypeError, match="plain values only"):
        run.save_elite({"center": weights}, weights)


def tensorboard_points(logdir: Path) -> list[tuple[int, str, float]]:
    import tensorflow as tf

    seen = []
    for event_file in sorted(logdir.iterdir()):
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            for value in event.summary.value:
                assert value.metadata.plugin_data.plugin_name == "scalars"
                seen.append((event.step, value.tag, float(tf.make_ndarray(value.tensor))))
    return seen


def test_tensorboard_scalars(tmp_path):
    pytest.importorskip("tensorflow")
    writer = RunDir(tmp_path).tensorboard_writer()
    writer.scalars(0, {"return/best": 1.5, "frames_per_s": 1000, "elite": None})
    writer.scalars(1, {"return/best": 2.5})
    writer.close()
    assert sorted(tensorboard_points(tmp_path / "tensorboard")) == [
        (0, "frames_per_s", 1000.0),
        (0, "return/best", 1.5),
        (1, "return/best", 2.5),
    ]


def test_tensorboard_resume_drops_points_after_the_checkpoint(tmp_path):
    """A run killed after logging steps 10..40 but checkpointed at 20 resumes and logs 30, 40
    again (twice, to show repeated resumes): each step appears once, with the new values."""
    pytest.importorskip("tensorflow")
    run = RunDir(tmp_path)
    writer = run.tensorboard_writer()
    for step in (10, 20, 30, 40):
        writer.scalars(step, {"best": step})
    writer.close()
    for _ in range(2):
        writer = run.tensorboard_writer(resume_step=20)
        for step in (30, 40):
            writer.scalars(step, {"best": step + 1})
        writer.close()
    logdir = tmp_path / "tensorboard"
    event_file = sorted(logdir.iterdir())[-1]
    event_file.write_bytes(event_file.read_bytes()[:-7])  # a kill in the middle of a record
    writer = run.tensorboard_writer(resume_step=30)
    writer.scalars(40, {"best": 42})
    writer.close()
    assert sorted(tensorboard_points(logdir)) == [
        (10, "best", 10.0),
        (20, "best", 20.0),
        (30, "best", 31.0),
        (40, "best", 42.0),
    ]
    assert not [p for p in logdir.iterdir() if p.name.startswith(".")]


def test_first_missing_generation_finds_a_row_cut_short(tmp_path):
    path = tmp_path / "metrics.csv"
    assert first_missing_generation(path) == 0  # no file: nothing logged
    writer = MetricsWriter(path)
    for generation in range(5):
        writer.write({"generation": generation, "best": 1.5, "mean": 0.5})
    assert first_missing_generation(path) == 5
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = lines[3][:3] + "\n"  # generation 2, cut short by outside damage
    path.write_text("".join(lines))
    assert first_missing_generation(path) == 2


def test_atomic_write_never_follows_a_link_at_its_temporary_name(tmp_path):
    """A link planted where the temporary file goes is removed, not written through, and the
    target becomes a regular file; a failed write leaves the old content and no temp file."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    target = tmp_path / "config.yaml"
    temp_path(target).symlink_to(victim)
    with atomic_write(target) as file:
        file.write(b"new\n")
    assert victim.read_text() == "precious\n"
    assert target.read_text() == "new\n" and not target.is_symlink()
    with pytest.raises(OSError, match="disk"), atomic_write(target) as file:
        file.write(b"partial")
        raise OSError(errno.ENOSPC, "disk full")
    assert target.read_text() == "new\n" and not temp_path(target).exists()


def test_a_run_directory_whose_own_directories_are_links_is_refused(tmp_path, cfg):
    for name in ("checkpoints", "tensorboard"):
        run = RunDir(tmp_path / name / "run")
        run.create(cfg)
        (tmp_path / name / "elsewhere").mkdir()
        (run.path / name).symlink_to(tmp_path / name / "elsewhere")
        with pytest.raises(RunDirError, match=rf"run's directory .*/{name} is a symbolic link"):
            run.check(cfg, resume=True)


def test_metrics_rows_are_appended_without_following_a_link(tmp_path):
    victim = tmp_path / "victim.csv"
    (tmp_path / "metrics.csv").symlink_to(victim)  # dangling: opening would create it
    with pytest.raises(OSError, match="symbolic links"):
        MetricsWriter(tmp_path / "metrics.csv").write({"generation": 0})
    assert not victim.exists()
