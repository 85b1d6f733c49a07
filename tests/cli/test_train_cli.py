"""The training CLI end to end: runs, resumes after SIGKILL, replays, plots, rejects bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from run_helpers import GRID_STRATEGIES, search_rows, tiny_maze_config, train_and_kill

from neuroevo.cli import plot, train
from neuroevo.config.schema import config_from_dict, load_config
from neuroevo.run.run_dir import RunDir

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny_atari.yaml"
# Columns that depend on the clock, not on the search.
TIMING = {"wall_time_s", "frames_per_s"}


def cli(module: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def tensorboard_search_points(run_dir: Path) -> list[tuple[int, str, float]]:
    """Every (step, tag, value) of the run's TensorBoard files, clock-dependent tags left out."""
    import tensorflow as tf

    points = []
    for event_file in (run_dir / "tensorboard").iterdir():
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            points += [
                (event.step, v.tag, float(tf.make_ndarray(v.tensor)))
                for v in event.summary.value
                if v.tag not in TIMING
            ]
    return sorted(points)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> Path:
    """The tiny config trained to completion without interruption."""
    run_dir = tmp_path_factory.mktemp("runs") / "reference"
    done = cli("neuroevo.train", "--config", str(TINY), "--run-dir", str(run_dir), "--quiet")
    assert done.returncode == 0, done.stderr
    return run_dir


def test_run_writes_config_metrics_checkpoints_and_elite(reference_run: Path) -> None:
    rows = search_rows(reference_run)
    assert [int(r["generation"]) for r in rows] == [0, 1, 2]
    assert all(int(r["frames"]) > 0 for r in rows)
    frames = [int(r["frames"]) for r in rows]
    assert frames == sorted(frames)
    assert (reference_run / "config.yaml").is_file()
    assert sorted(p.name for p in (reference_run / "checkpoints").iterdir())[-1] == "ckpt-000003"
    state = yaml.safe_load(
        (reference_run / "checkpoints" / "ckpt-000003" / "state.yaml").read_text()
    )
    assert config_from_dict(state["config"]) == load_config(reference_run / "config.yaml")
    genome, weights = RunDir(reference_run).load_elite()
    assert genome["kind"] == "ga" and weights.dtype == np.float32 and weights.ndim == 1
    assert any((reference_run / "tensorboard").iterdir())


def test_resume_after_sigkill_equals_uninterrupted_run(reference_run: Path, tmp_path, rng) -> None:
    run_dir = tmp_path / "killed"
    # At a random moment after the first checkpoint exists.
    train_and_kill(["--config", str(TINY), "--quiet"], run_dir, 1, rng.uniform(0.0, 1.5))
    resumed = cli("neuroevo.train", "--resume", str(run_dir), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert search_rows(run_dir) == search_rows(reference_run)
    _, expected = RunDir(reference_run).load_elite()
    _, weights = RunDir(run_dir).load_elite()
    np.testing.assert_array_equal(weights, expected)
    assert tensorboard_search_points(run_dir) == tensorboard_search_points(reference_run)


def test_resume_skips_a_corrupt_checkpoint(reference_run: Path, tmp_path) -> None:
    run_dir = tmp_path / "corrupt"
    done = cli(
        "neuroevo.train",
        "--config",
        str(TINY),
        "--run-dir",
        str(run_dir),
        "--quiet",
        "--set",
        "budget.generations=2",
    )
    assert done.returncode == 0, done.stderr
    newest = run_dir / "checkpoints" / "ckpt-000002" / "arrays.npz"
    newest.write_bytes(newest.read_bytes()[:100])
    resumed = cli("neuroevo.train", "--resume", str(run_dir), "--set", "budget.generations=3")
    assert resumed.returncode == 0, resumed.stderr
    # One warning line names the skipped checkpoint, without the source line of the warn call.
    (warning,) = [line for line in resumed.stderr.splitlines() if "ckpt-000002" in line]
    assert warning.startswith(f"warning: resuming {run_dir} from ckpt-000001, skipping ckpt-0000")
    assert "warnings.warn" not in resumed.stderr and "UserWarning" not in resumed.stderr
    assert search_rows(run_dir) == search_rows(reference_run)


def test_a_run_another_process_trains_is_refused_until_that_process_ends(tmp_path) -> None:
    run_dir = tmp_path / "held"
    args = ["--config", str(TINY), "--run-dir", str(run_dir), "--quiet"]
    done = cli("neuroevo.train", *args, "--set", "budget.generations=1")
    assert done.returncode == 0, done.stderr
    rows = search_rows(run_dir)
    hold = "import sys; from neuroevo.run.run_dir import RunDir; run = RunDir(sys.argv[1])\n"
    hold += "run.claim(); print('held', flush=True); sys.stdin.read()"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        refused = cli("neuroevo.train", "--resume", str(run_dir), "--quiet")
    finally:
        holder.kill()  # killed, not closed: the OS drops its lock
        holder.wait()
    assert refused.returncode == 2, refused.stderr
    assert f"in use by another training process (pid {holder.pid})" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert search_rows(run_dir) == rows
    resumed = cli("neuroevo.train", "--resume", str(run_dir), "--set", "budget.generations=2")
    assert resumed.returncode == 0, resumed.stderr
    assert [int(r["generation"]) for r in search_rows(run_dir)] == [0, 1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "missing.yaml"], "not found"),
        (["--set", "algorithm.ga.populaton=5"], "did you mean 'population_size'"),
        (
            ["--set", "algorithm.ga.population=5"],
            "key 'algorithm.ga.population' was renamed to 'algorithm.ga.population_size'",
        ),
        (["--set", "algorithm.ga.truncation=50"], "truncation"),
        (["--set", "env.id=no_such_game"], "no_such_game"),
        (["--set", "budget"], "key.path=value"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args, message, tmp_path) -> None:
    done = cli("neuroevo.train", "--config", str(TINY), "--run-dir", str(tmp_path / "r"), *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_more_workers_than_cores_get_their_inter_op_threads(tmp_path) -> None:
    done = cli(
        "neuroevo.train",
        "--config",
        str(TINY),
        "--run-dir",
        str(tmp_path / "r"),
        "--quiet",
        "--set",
        "evaluator.workers=5",
        "--set",
        "budget.generations=1",
    )
    assert done.returncode == 0, done.stderr
    assert "inter-op threads" not in done.stderr


def test_yaml_syntax_error_names_the_line(tmp_path) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text("seed: 1\nalgorithm:\n  name: [ga\n")
    done = cli("neuroevo.train", "--config", str(config), "--run-dir", str(tmp_path / "r"))
    assert done.returncode == 2
    assert "line" in done.stderr


def test_refuses_a_run_dir_holding_another_run(reference_run: Path) -> None:
    before = (reference_run / "metrics.csv").read_bytes()
    done = cli("neuroevo.train", "--config", str(TINY), "--run-dir", str(reference_run))
    assert done.returncode == 2 and "--resume" in done.stderr
    incompatible = cli(
        "neuroevo.train", "--resume", str(reference_run), "--set", "algorithm.ga.mutation_power=0.5"
    )
    assert incompatible.returncode == 2 and "mutation_power" in incompatible.stderr
    assert (reference_run / "metrics.csv").read_bytes() == before


def test_play_replays_the_elite_and_writes_a_video(reference_run: Path, tmp_path) -> None:
    video = tmp_path / "elite.mp4"
    done = cli("neuroevo.play", str(reference_run), "--episodes", "2", "--video", str(video))
    assert done.returncode == 0, done.stderr
    returns = [
        float(line.rsplit(" ", 1)[1])
        for line in done.stdout.splitlines()
        if line.startswith("episode seed")
    ]
    assert len(returns) == 2
    video_return = float(done.stdout.split("return ")[-1])
    assert video_return == returns[0]  # same seed, same policy, same episode
    import imageio.v2 as imageio

    frames = imageio.mimread(video, memtest=False)
    assert len(frames) > 10 and frames[0].shape == (210, 160, 3)
    assert np.ptp(np.stack(frames)) > 0  # real game pixels, not a blank video


def test_plot_writes_a_png(reference_run: Path, tmp_path) -> None:
    output = tmp_path / "curves.png"
    assert plot.main([str(reference_run), str(reference_run), "-o", str(output)]) == 0
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot.main([str(tmp_path / "nothing"), "-o", str(output)]) == 2


def test_quick_default_config_is_valid() -> None:
    from neuroevo.config.schema import load_config

    cfg = load_config(train.configs_dir() / train.QUICK_CONFIG)
    assert cfg.budget.hours is not None or cfg.budget.generations is not None


def test_start_over_after_a_kill_in_the_first_checkpoint_logs_each_point_once(
    tmp_path, monkeypatch, capsys
) -> None:
    """A kill while the first checkpoint is saved leaves generation 0 logged and no checkpoint:
    --resume refuses and names the leftover; --resume --start-over runs the generation again
    and TensorBoard and metrics.csv hold it once, as in a run never stopped."""
    from neuroevo.run import trainer

    args = ["--config", str(TINY), "--quiet", "--set", "budget.generations=1"]
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    assert train.main([*args, "--run-dir", str(reference)]) == 0

    def killed_while_saving(run_dir, step, state, keep, files=None):
        saving = Path(run_dir) / f".ckpt-{step:06d}.saving"
        saving.mkdir(parents=True)
        (saving / "state.yaml").write_text("optimizer: {gener")
        raise KeyboardInterrupt  # stands in for the SIGKILL: nothing after this runs

    with monkeypatch.context() as patch:
        patch.setattr(trainer.checkpoint, "save_checkpoint", killed_while_saving)
        assert train.main([*args, "--run-dir", str(killed)]) == 130
    assert len(tensorboard_search_points(killed)) == len(tensorboard_search_points(reference))
    capsys.readouterr()

    assert train.main(["--resume", str(killed)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert ".ckpt-000001.saving: left by an interrupted save" in line and "--start-over" in line

    assert train.main(["--resume", str(killed), "--start-over", "--quiet"]) == 0
    assert search_rows(killed) == search_rows(reference)
    assert tensorboard_search_points(killed) == tensorboard_search_points(reference)


def test_target_return_stops_at_the_first_generation_that_reaches_it(tmp_path) -> None:
    """A maze GA with a target between two generations' best returns stops at the later one,
    although its budget allows more generations."""
    common = [
        "--config",
        str(ROOT / "configs" / "maze_ga.yaml"),
        "--set",
        "algorithm.ga.population_size=20",
        "--set",
        "algorithm.ga.truncation=5",
        "--set",
        "noise.size=1000000",
        "--quiet",
    ]
    free = tmp_path / "free"
    assert train.main([*common, "--set", "budget.generations=6", "--run-dir", str(free)]) == 0
    best = np.loadtxt(free / "metrics.csv", delimiter=",", skiprows=1, usecols=4)
    so_far = np.maximum.accumulate(best)
    improved = np.flatnonzero(so_far[1:] > so_far[:-1]) + 1
    assert improved.size, best  # the seed's GA improves within six generations
    first = int(improved[0])
    target = (so_far[first - 1] + so_far[first]) / 2
    stopped = tmp_path / "stopped"
    argv = ["--set", "budget.generations=6", "--set", f"budget.target_return={target}"]
    assert train.main([*common, *argv, "--run-dir", str(stopped)]) == 0
    stopped_best = np.loadtxt(stopped / "metrics.csv", delimiter=",", skiprows=1, usecols=4)
    np.testing.assert_array_equal(np.atleast_1d(stopped_best), best[: first + 1])


# ----------------------------------------------------------- kills, corrupt files, full disk


def tiny_run(run_dir: Path, generations: int) -> int:
    """Trains the tiny config in this process (TensorFlow is loaded once for all tests)."""
    args = ["--config", str(TINY), "--quiet", "--set", f"budget.generations={generations}"]
    return train.main([*args, "--run-dir", str(run_dir)])


def policy(run_dir: Path, best: bool = False) -> tuple[dict, np.ndarray]:
    return RunDir(run_dir).load_elite(best=best)


def test_a_kill_between_the_elite_write_and_its_checkpoint_rolls_the_policies_back(
    tmp_path, monkeypatch
) -> None:
    """Generation 2 writes elite.npz (and maybe best.npz), then dies before its checkpoint;
    resuming with a budget the checkpoint already meets must leave the policies of the
    checkpoint's generation, not those of the lost one."""
    from neuroevo.run import trainer

    reference, killed = tmp_path / "reference", tmp_path / "killed"
    assert tiny_run(reference, 2) == 0
    save = trainer.checkpoint.save_checkpoint

    def killed_before_checkpoint_3(run_dir, step, state, keep, files=None):
        if step == 3:
            raise KeyboardInterrupt  # stands in for a SIGKILL: nothing after this runs
        return save(run_dir, step, state, keep, files=files)

    with monkeypatch.context() as patch:
        patch.setattr(trainer.checkpoint, "save_checkpoint", killed_before_checkpoint_3)
        assert tiny_run(killed, 3) == 130
    ckpt = killed / "checkpoints" / "ckpt-000002"
    elite = killed / "elite.npz"
    assert elite.stat().st_ino != (ckpt / "elite.npz").stat().st_ino  # rewritten after ckpt 2
    # Whatever generation 2 chose, make the lost policies unmistakable.
    RunDir(killed).save_elite({"lost": 1}, np.zeros(3, np.float32))
    RunDir(killed).save_elite({"lost": 2}, np.zeros(3, np.float32), best=True)

    assert train.main(["--resume", str(killed), "--quiet", "--set", "budget.generations=2"]) == 0
    assert search_rows(killed) == search_rows(reference)
    for best in (False, True):
        genome, weights = policy(killed, best)
        expected_genome, expected_weights = policy(reference, best)
        assert genome == expected_genome
        np.testing.assert_array_equal(weights, expected_weights)
    assert not list(killed.glob(".*.tmp"))


def rewrite_checkpoint(path: Path, change) -> None:
    """Applies ``change(tree, arrays)`` to a checkpoint's state and recomputes its MANIFEST,
    as someone editing it by hand would: the sha256 check alone then passes."""
    import hashlib

    from neuroevo.run.checkpoints import _write_npz, read_npz

    tree = yaml.safe_load((path / "state.yaml").read_text())
    arrays = read_npz(path / "arrays.npz")
    change(tree, arrays)
    (path / "state.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))
    with open(path / "arrays.npz", "wb") as file:
        _write_npz(file, arrays)
    names = [line.split("  ")[1] for line in (path / "MANIFEST").read_text().splitlines()]
    (path / "MANIFEST").write_text(
        "".join(
            f"{hashlib.sha256((path / name).read_bytes()).hexdigest()}  {name}\n" for name in names
        )
    )


def drop_optimizer(tree: dict, arrays: dict) -> None:
    del tree["optimizer"]
    for key in [k for k in arrays if k.startswith("optimizer/")]:
        del arrays[key]


def frames_as_text(tree: dict, arrays: dict) -> None:
    tree["counters"]["frames"] = str(tree["counters"]["frames"])


def truncate_genomes(tree: dict, arrays: dict) -> None:
    key = "optimizer/population.mutation_index"
    arrays[key] = arrays[key][: len(arrays[key]) // 2]


def truncate_init_indices(tree: dict, arrays: dict) -> None:
    key = "optimizer/population.init_index"
    arrays[key] = arrays[key][:-1]


def drop_counters(tree: dict, arrays: dict) -> None:
    del tree["counters"]


CORRUPTIONS = {
    "no optimizer section": (drop_optimizer, "no optimizer section"),
    "a string in counters.frames": (frames_as_text, "counters.frames must be an int"),
    "truncated mutation arrays": (truncate_genomes, "GA genomes do not fit together"),
    "truncated init indices": (truncate_init_indices, "GA genomes do not fit together"),
    "no counters section": (drop_counters, "no counters section"),
}


@pytest.fixture(scope="module")
def two_generations(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "two"
    assert tiny_run(run_dir, 2) == 0
    return run_dir


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_checkpoint_with_a_valid_manifest_but_invalid_content_is_not_resumed(
    corruption: str, two_generations: Path, tmp_path, capsys
) -> None:
    import shutil

    change, reason = CORRUPTIONS[corruption]
    run_dir = tmp_path / "run"
    shutil.copytree(two_generations, run_dir)
    for path in sorted((run_dir / "checkpoints").iterdir()):
        rewrite_checkpoint(path, change)
    before = sorted(p.name for p in run_dir.iterdir())
    capsys.readouterr()
    assert train.main(["--resume", str(run_dir), "--quiet"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: cannot resume '{run_dir}': it holds no checkpoint")
    for name in ("ckpt-000002", "ckpt-000001"):
        assert f"{name}: its state does not fit this run: " in line
    assert line.count(reason) == 2
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_resume_falls_back_past_a_checkpoint_with_invalid_content(
    two_generations: Path, tmp_path, reference_run: Path
) -> None:
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(two_generations, run_dir)
    rewrite_checkpoint(run_dir / "checkpoints" / "ckpt-000002", frames_as_text)
    with pytest.warns(UserWarning, match=r"from ckpt-000001, skipping ckpt-000002: its state"):
        assert (
            train.main(["--resume", str(run_dir), "--quiet", "--set", "budget.generations=3"]) == 0
        )
    assert search_rows(run_dir) == search_rows(reference_run)


def test_a_plain_file_named_like_a_checkpoint_does_not_break_later_saves(
    two_generations: Path, tmp_path, reference_run: Path
) -> None:
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(two_generations, run_dir)
    stray = run_dir / "checkpoints" / "ckpt-000003"
    stray.write_text("not a checkpoint")
    with pytest.warns(UserWarning, match="is not a checkpoint directory"):
        assert (
            train.main(["--resume", str(run_dir), "--quiet", "--set", "budget.generations=3"]) == 0
        )
    assert (run_dir / "checkpoints" / "ckpt-000003.not-a-checkpoint").read_text() == (
        "not a checkpoint"
    )
    assert (stray / "MANIFEST").is_file()
    assert search_rows(run_dir) == search_rows(reference_run)


class DiskFullWriter:
    """A file whose writes stop half-way with ENOSPC, as on a disk that fills up."""

    def __init__(self, file):
        self._file = file

    def write(self, text: str) -> int:
        import errno

        self._file.write(text[: len(text) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()

    def __getattr__(self, name: str):
        return getattr(self._file, name)


@pytest.mark.parametrize("resume", [False, True])
def test_a_full_disk_while_config_yaml_is_written_is_one_line_and_leaves_it_usable(
    resume: bool, tmp_path, monkeypatch, capsys
) -> None:
    from neuroevo.core import files

    run_dir = tmp_path / "run"
    if resume:
        assert tiny_run(run_dir, 1) == 0
        saved = (run_dir / "config.yaml").read_bytes()
        argv = ["--resume", str(run_dir), "--quiet", "--set", "budget.generations=2"]
    else:
        argv = ["--config", str(TINY), "--quiet", "--set", "budget.generations=1"]
        argv += ["--run-dir", str(run_dir)]

    def disk_full_open(fd, mode="r", *args, **kwargs):
        # atomic_write opens its exclusively created temp file by descriptor
        return DiskFullWriter(open(fd, mode, *args, **kwargs))

    capsys.readouterr()
    with monkeypatch.context() as patch:
        patch.setattr(files, "open", disk_full_open, raising=False)
        assert train.main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: disk full while writing {run_dir / 'config.yaml'} (")
    fix = "resume the run with --resume" if resume else "start the run again"
    assert line.endswith(f"free): free some space, then {fix}")
    assert not list(run_dir.glob(".*.tmp"))
    if resume:
        assert (run_dir / "config.yaml").read_bytes() == saved
    else:
        assert list(run_dir.iterdir()) == []
    assert train.main(argv) == 0  # the same command works once there is space


def drop_policy_files(tree: dict, arrays: dict) -> None:
    del tree["policy_files"]


def test_a_run_whose_checkpoints_hold_no_policies_still_resumes(
    two_generations: Path, tmp_path, reference_run: Path
) -> None:
    """Checkpoints written before the policies were saved with them (no policy_files, two
    files in the MANIFEST) resume as before, leaving elite.npz and best.npz where they are."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(two_generations, run_dir)
    for path in (run_dir / "checkpoints").iterdir():
        for name in ("elite.npz", "best.npz"):
            (path / name).unlink(missing_ok=True)
        manifest = (path / "MANIFEST").read_text().splitlines(keepends=True)
        (path / "MANIFEST").write_text(
            "".join(line for line in manifest if ".npz" not in line or "arrays.npz" in line)
        )
        rewrite_checkpoint(path, drop_policy_files)
    elite = (run_dir / "elite.npz").read_bytes()
    assert train.main(["--resume", str(run_dir), "--quiet", "--set", "budget.generations=2"]) == 0
    assert (run_dir / "elite.npz").read_bytes() == elite
    assert train.main(["--resume", str(run_dir), "--quiet", "--set", "budget.generations=3"]) == 0
    assert search_rows(run_dir) == search_rows(reference_run)


NEW_STRATEGIES = ["pgpe", "snes", "xnes", "cem", "sep_cma_es", "cma_es", "lm_ma_es", "map_elites"]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", [*NEW_STRATEGIES, "cma_me", "cma_mae"])
def test_every_new_strategy_resumes_exactly_after_sigkill(algorithm: str, tmp_path, rng) -> None:
    """Killed at a random moment after its first checkpoint, the resumed run logs the same
    metrics and ends with the same elite as an uninterrupted one."""
    from neuroevo.run.plan import plan
    from neuroevo.run.trainer import open_run

    config = tiny_maze_config(tmp_path, algorithm)
    reference = tmp_path / "reference"
    trainer = open_run(plan(load_config(config), reference), quiet=True)
    try:
        trainer.train()
    finally:
        trainer.close()
    killed = tmp_path / "killed"
    train_and_kill(["--config", str(config), "--quiet"], killed, 1, rng.uniform(0.0, 1.0))
    trainer = open_run(plan(load_config(killed / "config.yaml"), killed, resume=True), quiet=True)
    try:
        trainer.train()
    finally:
        trainer.close()
    assert [int(r["generation"]) for r in search_rows(reference)] == [0, 1, 2, 3]
    assert search_rows(killed) == search_rows(reference)
    _, expected = RunDir(reference).load_elite()
    _, weights = RunDir(killed).load_elite()
    np.testing.assert_array_equal(weights, expected)
    if algorithm in GRID_STRATEGIES:  # the grid archive is drawn
        assert plot.main(["--archive", str(killed), "-o", str(tmp_path / "grid.png")]) == 0
        assert (tmp_path / "grid.png").stat().st_size > 10_000


def received_copy(run_dir: Path, tmp_path: Path) -> Path:
    """A copy of ``run_dir``, as a run directory received from someone else."""
    import shutil

    copy = tmp_path / "received"
    shutil.copytree(run_dir, copy, symlinks=True)
    return copy


def test_links_planted_in_a_run_directory_are_never_written_through(
    reference_run: Path, tmp_path
) -> None:
    """A link at every temporary name a resume and an evaluation write through (config,
    metrics, elite, best, test result, the TensorBoard rewrite), to existing files and to
    files that do not exist yet: none is written or created, and the run's own files are
    regular files afterwards."""
    from neuroevo.cli import evaluate

    run = received_copy(reference_run, tmp_path)
    victims = tmp_path / "victims"
    victims.mkdir()
    events = sorted((run / "tensorboard").glob("events.out.tfevents.*"))[0].name
    merged = events if events.endswith(".resumed") else f"{events}.resumed"
    names = [".config.yaml", ".metrics.csv", ".elite.npz", ".best.npz", ".test.json"]
    temps = [run / f"{name}.tmp" for name in names] + [run / "tensorboard" / f".{merged}.tmp"]
    for number, temp in enumerate(temps):
        victim = victims / f"victim-{number}"
        if number % 2 == 0:  # half to a precious file, half to one that would be created
            victim.write_text("precious\n")
        temp.symlink_to(victim)
    argv = ["--resume", str(run), "--quiet", "--set", "budget.generations=4"]
    assert train.main(argv) == 0
    assert evaluate.main([str(run), "--episodes", "2"]) == 0
    assert sorted(p.name for p in victims.iterdir()) == [f"victim-{n}" for n in (0, 2, 4)]
    assert all(p.read_text() == "precious\n" for p in victims.iterdir())
    for name in ("config.yaml", "metrics.csv", "elite.npz", "best.npz", "test.json"):
        assert (run / name).is_file() and not (run / name).is_symlink(), name
    assert len(search_rows(run)) == 4


@pytest.mark.parametrize("directory", ["checkpoints", "tensorboard"])
def test_a_run_whose_own_directory_is_a_link_is_not_resumed(
    directory, reference_run: Path, tmp_path, capsys
) -> None:
    """Checkpoints would be written and pruned, event files rewritten, in the directory the
    link points to: refused in one line, that directory untouched."""
    run = received_copy(reference_run, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (run / directory).rename(elsewhere)
    (run / directory).symlink_to(elsewhere)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in elsewhere.rglob("*"))
    assert train.main(["--resume", str(run), "--quiet", "--set", "budget.generations=4"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: the run's directory {run / directory} is a symbolic link")
    assert sorted((p.name, p.stat().st_mtime_ns) for p in elsewhere.rglob("*")) == before


def test_a_metrics_row_cut_short_is_written_again_on_resume(reference_run: Path, tmp_path) -> None:
    """A row damaged from outside before the newest checkpoint: the resume starts from the
    checkpoint before it (saying so in a warning), so the row is logged again and the
    metrics equal an uninterrupted run's."""
    run = received_copy(reference_run, tmp_path)
    metrics = run / "metrics.csv"
    lines = metrics.read_text().splitlines(keepends=True)
    lines[2] = lines[2][: len(lines[2]) // 2] + "\n"  # generation 1, the newest checkpoint is 3
    metrics.write_text("".join(lines))
    skipped = r"from ckpt-000001, skipping .*metrics\.csv lacks the row of generation 1 \(cut"
    with pytest.warns(UserWarning, match=skipped):
        assert train.main(["--resume", str(run), "--quiet"]) == 0
    assert search_rows(run) == search_rows(reference_run)


def test_help_names_every_registered_optimizer(capsys) -> None:
    from neuroevo.algorithms import ALGORITHMS

    with pytest.raises(SystemExit):
        train.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"one of the {len(ALGORITHMS)} registered optimizers ({', '.join(ALGORITHMS)})" in text
