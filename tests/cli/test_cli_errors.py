"""Every user mistake at the command line: exit 2, one ``error:`` line, no file touched.

The table runs ``train``, ``play``, ``evaluate`` and ``plot`` in-process (the mistakes are
refused before any env is built, most before TensorFlow does any work) against a temporary
directory that holds every kind of run directory, and compares a snapshot of that directory,
the noise cache included, before and after each call.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from read_only import read_only_directory
from run_helpers import SMALL_CARTPOLE

from neuroevo.cli import doctor, evaluate, play, plot, train
from neuroevo.config.schema import apply_overrides, load_config, save_config
from neuroevo.core import extras
from neuroevo.run import checkpoints as checkpoint
from neuroevo.run.run_dir import RunDir

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny_atari.yaml")
NEW = "--run-dir={tmp}/new"
NOISE = "noise.cache_dir={tmp}/noise"


def base(*args: str) -> tuple[str, ...]:
    """A new tiny run in ``{tmp}/new`` with the noise cache in ``{tmp}/noise``, plus ``args``."""
    return ("--config", TINY, "--set", NOISE, NEW, *args)


def sets(*assignments: str) -> tuple[str, ...]:
    """``--set`` before each ``key.path=value``."""
    return tuple(arg for assignment in assignments for arg in ("--set", assignment))


HOPPER = ("env.kind=mujoco", "env.id=Hopper", "model.name=mlp")
CARTPOLE = ("env.kind=gym", "env.id=CartPole-v1", "model.name=mlp")


# (entry point, arguments with {tmp} for the temp directory, text the message must hold)
TABLE: list[tuple[str, tuple[str, ...], str]] = [
    # Config files.
    ("train", ("--config", "{tmp}/missing.yaml", NEW), "not found"),
    ("train", ("--config", "{tmp}/broken.yaml", NEW), "invalid YAML at line"),
    ("train", ("--config", "{tmp}/list.yaml", NEW), "must hold a mapping"),
    ("train", ("--config", "{tmp}/duplicate.yaml", NEW), "duplicate key 'seed'"),
    ("train", ("--config", "{tmp}/clutter", NEW), "clutter' is a directory; give a YAML file"),
    ("train", ("--config", "/dev/zero", NEW), "'/dev/zero' is not a regular file"),
    ("train", ("--config", "{tmp}/huge.yaml", NEW), "is larger than 1 MiB, far beyond any config"),
    # --set syntax and keys.
    ("train", base("--set", "budget"), "must look like key.path=value"),
    ("train", base("--set", "=3"), "must look like key.path=value"),
    ("train", base("--set", "seed.x=1"), "'seed' is a value, not a section"),
    ("train", base("--set", "nosuch=1"), "unknown key 'nosuch'"),
    ("train", base("--set", "algorithm.ga.populaton=5"), "did you mean 'population_size'"),
    ("train", base("--set", "algorithm.ga.population=5"), "renamed to"),
    ("train", base("--set", "model.observation_normalization=true"), "renamed to"),
    ("train", base("--set", "env.atari.frameskip=2"), "env.atari.frameskip"),
    # Values.
    ("train", base("--set", "seed=-1"), "seed"),
    ("train", base("--set", "algorithm.ga.truncation=50"), "truncation"),
    ("train", base("--set", "algorithm.ga.population_size=-1"), "population_size"),
    ("train", base("--set", "algorithm.ga.population_size=abc"), "population_size"),
    ("train", base("--set", "algorithm.ga.population_size=2.5"), "population_size"),
    ("train", base("--set", "algorithm.ga.mutation_power=0"), "mutation_power"),
    ("train", base("--set", "algorithm.es.sigma=-1"), "algorithm.es.sigma"),
    ("train", base("--set", "algorithm.es.fitness_shaping=nope"), "fitness_shaping"),
    ("train", base("--set", "algorithm.name=cmaes"), "cmaes"),
    ("train", base("--set", "env.kind=nes"), "nes"),
    ("train", base("--set", "env.id= "), "env.id"),
    ("train", base("--set", "env.max_episode_steps=0"), "max_episode_steps"),
    ("train", base("--set", "env.max_episode_steps=1e12"), "max_episode_steps"),
    ("train", base("--set", "env.atari.frame_skip=0"), "frame_skip"),
    ("train", base("--set", "env.atari.sticky_action_prob=2"), "sticky_action_prob"),
    ("train", base("--set", "model.name=resnet"), "resnet"),
    ("train", base("--set", "model.name=mlp"), "model.name"),
    ("train", base("--set", "model.output=tanh"), "model.output"),
    ("train", base("--set", "model.dtype=float16"), "model.dtype"),
    ("train", base("--set", "budget.generations=null"), "at least one"),
    ("train", base("--set", "budget.hours=-1"), "budget.hours"),
    ("train", base("--set", "budget.target_return=.nan"), "budget.target_return"),
    ("train", base("--set", "logging.keep_checkpoints=0"), "keep_checkpoints"),
    ("train", base("--set", "evaluator.workers=0"), "evaluator.workers"),
    ("train", base("--set", "evaluator.chunk_steps=0"), "chunk_steps"),
    ("train", base("--set", "evaluator.rollout=fast"), "rollout"),
    ("train", base("--set", "noise.size=0"), "noise.size"),
    # Games, tasks and ids that do not exist (checked when the env is made).
    ("train", base("--set", "env.id=no_such_game"), "no_such_game"),
    (
        "train",
        base(*sets("env.kind=mujoco", "env.id=NoSuchTask", "model.name=mlp")),
        "NoSuchTask",
    ),
    (
        "train",
        base(*sets("env.kind=gym", "env.id=NoSuch-v0", "model.name=mlp")),
        "gymnasium cannot make 'NoSuch-v0'",
    ),
    # Sizes that do not fit: refused before anything is allocated or written.
    ("train", base("--set", "evaluator.slots_per_worker=1e9"), "slots_per_worker"),
    (
        "train",
        base(*sets("evaluator.workers=1000", "evaluator.slots_per_worker=1000")),
        "an env holds at most 65536 slots",
    ),
    ("train", base("--set", "algorithm.ga.population_size=1e12"), "of memory"),
    (
        "train",
        base(*sets("algorithm.name=es", "algorithm.es.population_size=1e11")),
        "algorithm.es.population_size",
    ),
    ("train", base("--set", "noise.size=1e14"), "of disk in"),
    ("train", base("--set", "noise.size=1000"), "noise.size: 1,000 is smaller than"),
    (
        "train",
        base(*sets("evaluator.slots_per_worker=32768", "algorithm.ga.population_size=65536")),
        "model storage for 65,536 slots of nature_small",
    ),
    # Thread counts (refused before any thread is started).
    (
        "train",
        base(*sets("evaluator.workers=65536", "evaluator.slots_per_worker=1")),
        "evaluator.workers: 65536 must be <= 1024",
    ),
    (
        "train",
        base(*sets(*CARTPOLE, "env.gym.threads=100000")),
        "env.gym.threads",
    ),
    (
        "train",
        base(*sets("evaluator.backend=ray", "evaluator.ray.workers_per_node=1000000")),
        "evaluator.ray.workers_per_node: 1000000 must be in [1, 256]",
    ),
    # MuJoCo models and settings the make op would reject.
    (
        "train",
        base(*sets(*HOPPER, "env.mujoco.frame_skip=1e12")),
        "env.mujoco.frame_skip",
    ),
    (
        "train",
        base(*sets(*HOPPER, "env.mujoco.model_xml={tmp}/notxml.xml")),
        "cannot load the MuJoCo model",
    ),
    (
        "train",
        base(*sets(*HOPPER, "env.mujoco.model_xml={tmp}/include.xml")),
        "Error opening file 'gone.xml'",
    ),
    (
        "train",
        base(*sets(*HOPPER, "env.mujoco.model_xml={tmp}/nojoint.xml")),
        "is too small for task Hopper",
    ),
    (
        "train",
        base(*sets(*HOPPER, "env.mujoco.model_xml=humanoid_trap.xml")),
        "does not fit task Hopper",
    ),
    # Sizes of every request, buffer and network (refused before the run directory exists).
    ("train", base("--set", "test.episodes=1e12"), "lower test.episodes"),
    (
        "train",
        base("--set", "algorithm.ga.validation_episodes=1e12"),
        "lower algorithm.ga.validation_episodes",
    ),
    (
        "train",
        base(*sets("algorithm.name=es", "algorithm.es.center_episodes=1e12")),
        "lower algorithm.es.center_episodes",
    ),
    (
        "train",
        base(*sets("algorithm.name=ns_es", "algorithm.ns_es.meta_population=1e9")),
        "lower algorithm.ns_es.meta_population",
    ),
    (
        "train",
        base(*sets("behavior.kind=trajectory", "behavior.samples=1e9")),
        "lower behavior.samples",
    ),
    (
        "train",
        base(*sets(*HOPPER, "model.mlp.hidden_sizes=[1000000,1000000]")),
        "networks of 1,000,016,000,003 parameters",
    ),
    ("evaluate", ("{tmp}/played", "--episodes", "10000000000"), "lower --episodes"),
    # A gymnasium behaviour function that breaks its contract (found on a probe episode).
    (
        "train",
        base(
            *sets(*CARTPOLE, "algorithm.name=ga_ns", "env.gym.behavior=behavior_functions:raises")
        ),
        "'behavior_functions:raises' raised KeyError: 'x_position' (after reset)",
    ),
    (
        "train",
        base(
            *sets(*CARTPOLE, "algorithm.name=ga_ns", "env.gym.behavior=behavior_functions:varying")
        ),
        "values at step 1 of a probe episode, earlier 2",
    ),
    # The noise cache: '' would be the working directory.
    (
        "train",
        base("--set", "noise.cache_dir=''"),
        "noise.cache_dir: '' must be a directory, or null",
    ),
    # gymnasium's errors when the env is made, of any type (found before the run directory).
    (
        "train",
        base(*sets(*CARTPOLE, "env.id=nosuchmodule:Foo-v0")),
        "cannot make 'nosuchmodule:Foo-v0': ModuleNotFoundError: No module named 'nosuchmodule'",
    ),
    (
        "train",
        base(*sets(*CARTPOLE, "env.gym.make_kwargs={{bogus: 1}}")),
        "cannot make 'CartPole-v1' with make_kwargs {{'bogus': 1}}: TypeError",
    ),
    # A MAP-Elites grid of another dimension than the behaviour (checked before the run).
    (
        "train",
        base(
            *sets(
                "env.kind=maze",
                "env.id=hard",
                "model.name=mlp",
                "algorithm.name=map_elites",
                "algorithm.map_elites.cells=[5,5,5]",
                "algorithm.map_elites.behavior_low=[0,0,0]",
                "algorithm.map_elites.behavior_high=[1,1,1]",
            )
        ),
        "algorithm.map_elites.cells: [5, 5, 5] (list) must be one count per behaviour value: the "
        "behaviours have 2",
    ),
    (
        "train",
        base(*sets("algorithm.name=map_elites")),
        "algorithm.map_elites.cells: [10, 10] (list) must be one count per behaviour value: the "
        "behaviours have 128",
    ),
    (
        "train",
        base(
            *sets(
                "env.kind=maze",
                "env.id=hard",
                "model.name=mlp",
                "algorithm.name=map_elites",
                "behavior.kind=trajectory",
                "behavior.samples=4",
            )
        ),
        "the behaviours have 8",
    ),
    # A saved config cut short, and runs whose config imports code (refused unless trusted).
    ("train", ("--resume", "{tmp}/truncated"), "config.yaml is truncated or corrupt"),
    ("evaluate", ("{tmp}/truncated", "--episodes", "2"), "config.yaml is truncated or corrupt"),
    (
        "train",
        ("--resume", "{tmp}/imports"),
        "names Python modules to import, and importing runs their code: behavior_functions "
        "(env.gym.behavior); pass --allow-imports if you trust this run",
    ),
    ("play", ("{tmp}/imports",), "behavior_functions (env.gym.behavior); pass --allow-imports"),
    ("evaluate", ("{tmp}/imports",), "behavior_functions (env.gym.behavior); pass --allow-imp"),
    ("play", ("{tmp}/importsid",), "imports_nothing (env.id); pass --allow-imports"),
    # Run directories.
    ("train", base("--run-dir={tmp}/afile"), "is a file"),
    ("train", base("--run-dir={tmp}/run"), "already holds a run; continue it with --resume"),
    ("train", base("--run-dir={tmp}/clutter"), "holds files but no run"),
    ("train", ("--resume", "{tmp}/nothing"), "no run there"),
    ("train", ("--resume", "{tmp}/afile"), "no run there"),
    ("train", ("--resume", "{tmp}/run", "--run-dir", "{tmp}/x"), "--run-dir and --resume"),
    ("train", base("--start-over"), "--start-over only applies to --resume"),
    ("train", ("--resume", "{tmp}/run", "--set", "algorithm.ga.mutation_power=0.5"), "mutation"),
    ("train", ("--resume", "{tmp}/run", "--set", "env.id=breakout"), "env.id"),
    ("train", ("--resume", "{tmp}/oldrun"), "renamed"),
    ("train", ("--resume", "{tmp}/run"), "ckpt-000001: MANIFEST is missing"),
    ("train", ("--resume", "{tmp}/fresh"), "none was saved"),
    # Arguments.
    ("train", ("--bogus",), "unrecognized arguments: --bogus"),
    ("train", ("--config",), "expected one argument"),
    # play and plot.
    ("play", ("{tmp}/nothing",), "not found"),
    ("play", ("{tmp}/run",), "has not finished a generation"),
    ("play", ("{tmp}/played", "--episodes", "0"), "--episodes must be in [1, 65536]"),
    ("play", ("{tmp}/played", "--episodes", "100000"), "--episodes must be in [1, 65536]"),
    ("play", ("{tmp}/played", "--episodes", "1e9"), "invalid int value"),
    ("play", ("{tmp}/played",), "not a valid npz archive"),
    ("play", (), "give either RUN_DIR or --uber-genome FILE"),
    # Uber seed lists (refused before Uber's noise table is made).
    ("play", ("{tmp}/played", "--uber-genome", "{tmp}/seeds.json"), "either RUN_DIR or"),
    ("play", ("{tmp}/played", "--game", "pong"), "--game and --uber-model go with --uber-genome"),
    ("play", ("--uber-genome", "{tmp}/nothing.json"), "nothing.json not found"),
    ("play", ("--uber-genome", "{tmp}/seeds.json"), "names no game: pass --game"),
    ("play", ("--uber-genome", "{tmp}/bad_seeds.json", "--game", "pong"), "seeds[1] must be"),
    ("play", ("--uber-genome", "{tmp}/seeds.json", "--game", "frostbyte"), "'frostbite'?"),
    ("play", ("--uber-genome", "{tmp}/seeds.json", "--uber-model", "Big"), "invalid choice"),
    ("evaluate", ("--uber-genome", "{tmp}/seeds.json", "--game", "frostbyte"), "'frostbite'?"),
    ("evaluate", ("--uber-genome", "{tmp}/seeds.json", "--episodes", "0"), "--episodes must"),
    # Seeds, elites and outputs of play, evaluate and plot: refused before any episode runs.
    ("play", ("{tmp}/played", "--seed", str(2**63 - 1)), "--seed must be in [0, 922337203685477"),
    ("play", ("{tmp}/played", "--seed", str(2**70)), "--seed must be in [0, "),
    ("play", ("{tmp}/played", "--seed", "-1"), "--seed must be in [0, "),
    ("play", ("{tmp}/wide",), "the elite holds weights of shape (10,) but the run's model"),
    ("play", ("{tmp}/played", "--video", "{tmp}/afile/out.mp4"), "afile is a file, not a dir"),
    ("play", ("{tmp}/played", "--video", "{tmp}/clutter"), "clutter is a directory; give a"),
    ("play", ("{tmp}/played", "--video", "{tmp}/x.webm"), "cannot write a '.webm' file"),
    ("evaluate", ("{tmp}/tested", "--episodes", "2"), "is a directory, so the test result"),
    ("evaluate", ("{tmp}/nothing",), "holds no run"),
    ("plot", ("{tmp}/nocolumns", "-o", "{tmp}/x.png"), "no 'frames' or 'wall_time_s' column"),
    ("plot", ("{tmp}/garbage", "-o", "{tmp}/x.png"), "is not a metrics CSV file"),
    ("plot", ("{tmp}/played", "-o", "{tmp}/afile/x.png"), "afile is a file, not a directory"),
    ("plot", ("{tmp}/played", "-o", "{tmp}/x.bmp"), "cannot write a '.bmp' file"),
    ("doctor", ("--bogus",), "unrecognized arguments: --bogus"),
    # Read-only places ({ro}: a read-only mount as root, chmod a-w otherwise) and a noise
    # cache that is a file: refused before any work.
    ("train", base("--run-dir={ro}/new"), "new': {ro}: "),
    ("train", ("--resume", "{ro}/run"), "copy the run to a writable place and resume it there"),
    ("train", base("--set", "noise.cache_dir={ro}/noise"), "cannot write the noise table: {ro}"),
    ("train", base("--set", "noise.cache_dir={tmp}/afile"), "afile is a file, not a directory"),
    ("evaluate", ("{ro}/run", "--episodes", "2"), "cannot write the test result {ro}/run/test"),
    ("plot", ("{tmp}/played", "-o", "{ro}/x.png"), "cannot write -o {ro}/x.png: {ro}: "),
    ("play", ("{tmp}/played", "--video", "{ro}/x.mp4"), "cannot write --video {ro}/x.mp4"),
    ("plot", ("{tmp}/nothing", "-o", "{tmp}/x.png"), "metrics.csv not found"),
    ("plot", ("{tmp}/played", "-o", "{tmp}/x.png"), "has no generations yet"),
    ("plot", (), "required: run_dirs"),
]

MAINS = {
    "train": train.main,
    "play": play.main,
    "plot": plot.main,
    "evaluate": evaluate.main,
    "doctor": doctor.main,
}


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` with its content hash (directories as ``dir``)."""
    return {
        str(path.relative_to(root)): (
            "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        )
        for path in sorted(root.rglob("*"))
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """One directory with every kind of run directory and config file the table uses."""
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "noise").mkdir()
    (tmp / "afile").write_text("not a directory\n")
    (tmp / "clutter").mkdir()
    (tmp / "clutter" / "notes.txt").write_text("someone's files\n")
    (tmp / "broken.yaml").write_text("seed: 1\nalgorithm:\n  name: [ga\n")
    (tmp / "list.yaml").write_text("- seed\n- 1\n")
    (tmp / "duplicate.yaml").write_text("seed: 1\nseed: 2\n")
    (tmp / "seeds.json").write_text("[157822315, [94987453, 0.002]]\n")
    (tmp / "bad_seeds.json").write_text("seeds = [1, [2, 0.002, 3]]\n")
    (tmp / "notxml.xml").write_text("not XML at all")
    (tmp / "include.xml").write_text('<mujoco><include file="gone.xml"/></mujoco>')
    (tmp / "nojoint.xml").write_text(
        "<mujoco><worldbody><body><geom type='sphere' size='.1'/></body></worldbody></mujoco>"
    )
    cfg = load_config(TINY, [NOISE.format(tmp=tmp)])
    for name in ("run", "fresh", "played", "oldrun"):
        (tmp / name).mkdir()
        save_config(cfg, tmp / name / "config.yaml")
    # A checkpoint cut short before its manifest was written.
    saved = checkpoint.save_checkpoint(tmp / "run" / "checkpoints", 1, {"x": 1}, keep=1)
    (saved / checkpoint.MANIFEST_FILE).unlink()
    (tmp / "played" / "elite.npz").write_bytes(b"PK\x03\x04 truncated")
    for name in ("wide", "tested", "nocolumns", "garbage"):
        (tmp / name).mkdir()
        save_config(cfg, tmp / name / "config.yaml")
    RunDir(tmp / "wide").save_elite({"init_index": 0}, np.zeros(10, np.float32))  # not its width
    (tmp / "tested" / "test.json").mkdir()
    (tmp / "nocolumns" / "metrics.csv").write_text("a,b\n1,2\n")
    (tmp / "garbage" / "metrics.csv").write_bytes(b"\xff\xfe\x00 not text")
    (tmp / "played" / "metrics.csv").write_text("generation,frames,best\n")
    old = tmp / "oldrun" / "config.yaml"
    old.write_text(old.read_text().replace("population_size:", "population:"))
    with open(tmp / "huge.yaml", "wb") as huge:
        huge.truncate(2 << 20)
    (tmp / "truncated").mkdir()
    text = (tmp / "run" / "config.yaml").read_text()
    (tmp / "truncated" / "config.yaml").write_text(text[: len(text) // 2])
    gym = load_config(None, [*CARTPOLE, NOISE.format(tmp=tmp), "budget.generations=1"])
    for name, key in (
        ("imports", "env.gym.behavior=behavior_functions:raises"),
        ("importsid", "env.id=imports_nothing:Nothing-v0"),
    ):
        (tmp / name).mkdir()
        save_config(apply_overrides(gym, [key]), tmp / name / "config.yaml")
        RunDir(tmp / name).save_elite({"init_index": 0}, np.zeros(10, np.float32))
    return tmp


@pytest.fixture(scope="module")
def read_only(tmp_path_factory) -> Path:
    """A read-only directory (``tests/read_only.py``) holding a run (``run``) and an empty
    noise cache (``noise``)."""

    def fill(directory: Path) -> None:
        (directory / "noise").mkdir()
        (directory / "run").mkdir()
        save_config(load_config(TINY), directory / "run" / "config.yaml")

    with read_only_directory(tmp_path_factory.mktemp("ro") / "ro", fill) as path:
        yield path


@pytest.mark.parametrize(("entry", "args", "message"), TABLE, ids=lambda v: str(v)[:60])
def test_bad_input_is_one_line_exit_2_and_touches_nothing(
    entry, args, message, runs: Path, capsys, monkeypatch, request
) -> None:
    monkeypatch.chdir(runs)  # where a default runs/... directory would go
    before = snapshot(runs)
    ro = request.getfixturevalue("read_only") if "{ro}" in repr(args) else runs
    argv = [arg.format(tmp=runs, ro=ro) for arg in args]
    message = message.format(ro=ro)
    try:
        code = MAINS[entry](argv)
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert message in lines[0]
    assert out == ""
    assert snapshot(runs) == before


def test_table_covers_every_entry_point() -> None:
    assert len(TABLE) >= 50
    assert {entry for entry, _, _ in TABLE} == set(MAINS)


@pytest.mark.parametrize(
    ("extra", "entry", "args"),
    [
        ("plot", "plot", ("{tmp}/played", "-o", "{tmp}/x.png")),
        ("video", "play", ("{tmp}/played", "--video", "{tmp}/x.mp4")),
    ],
)
def test_a_missing_extra_names_its_pip_command(
    extra, entry, args, runs: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setitem(extras.EXTRAS, extra, ("neuroevo_no_such_module",))
    before = snapshot(runs)
    assert MAINS[entry]([arg.format(tmp=runs) for arg in args]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(f'pip install "neuroevo[{extra}]"')
    assert snapshot(runs) == before


def test_ctrl_c_during_start_up_is_one_line_exit_130(tmp_path, capsys, monkeypatch) -> None:
    from neuroevo.run import build

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "build_env", interrupted)
    noise = f"noise.cache_dir={tmp_path}/noise"
    code = train.main(["--config", TINY, "--set", noise, f"--run-dir={tmp_path}/new", "--quiet"])
    (line,) = capsys.readouterr().err.splitlines()
    assert code == 130
    assert line == "error: interrupted during start-up; nothing was written"
    assert snapshot(tmp_path) == {}


def test_a_real_ctrl_c_while_tensorflow_loads_is_one_line_exit_130(tmp_path) -> None:
    noise = f"noise.cache_dir={tmp_path}/noise"
    run_dir = str(tmp_path / "new")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "neuroevo.train",
            "--config",
            TINY,
            "--set",
            noise,
            "--run-dir",
            run_dir,
        ],
        stderr=subprocess.PIPE,
        text=True,
        # A child of a background job would inherit an ignored SIGINT.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # Interrupt once TensorFlow's library is being loaded (it takes seconds), not earlier:
    # on a loaded machine a fixed delay can land before Python handles SIGINT at all.
    maps = Path(f"/proc/{process.pid}/maps")
    deadline = time.monotonic() + 600
    while "tensorflow" not in maps.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=600)
    assert process.returncode == 130
    assert err == "error: interrupted during start-up; nothing was written\n"
    assert snapshot(tmp_path) == {}


def test_a_full_disk_while_the_elite_is_written_is_one_line(tmp_path, capsys, monkeypatch) -> None:
    def disk_full(file, arrays):
        file.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "_write_npz", disk_full)
    run_dir = tmp_path / "run"
    argv = ["--config", TINY, "--set", f"noise.cache_dir={tmp_path}/noise", "--quiet"]
    code = train.main([*argv, "--run-dir", str(run_dir), "--set", "budget.generations=1"])
    (line,) = capsys.readouterr().err.splitlines()
    assert code == 2
    assert line.startswith(f"error: disk full while writing {run_dir / 'elite.npz'}")
    assert not list(run_dir.glob(".*.tmp")) and not (run_dir / "elite.npz").exists()


@pytest.mark.parametrize("saved", [0, 1], ids=["no-checkpoint-yet", "after-a-checkpoint"])
def test_a_full_disk_while_a_checkpoint_is_written_is_one_line(
    saved, tmp_path, capsys, monkeypatch
):
    """The advice fits the run: ``--resume`` once a checkpoint exists, ``--resume
    --start-over`` before (``--resume`` alone would refuse a run with no checkpoint)."""
    from neuroevo.run import trainer

    save = trainer.checkpoint.save_checkpoint

    def disk_full(run_dir, step, state, keep, files=None):
        if step > saved:
            raise OSError(errno.ENOSPC, "No space left on device", str(run_dir / "x"))
        return save(run_dir, step, state, keep, files)

    monkeypatch.setattr(trainer.checkpoint, "save_checkpoint", disk_full)
    run_dir = tmp_path / "run"
    argv = ["--config", TINY, "--set", f"noise.cache_dir={tmp_path}/noise", "--quiet"]
    code = train.main([*argv, "--run-dir", str(run_dir), "--set", "budget.generations=2"])
    (line,) = capsys.readouterr().err.splitlines()
    assert code == 2
    assert line.startswith(f"error: disk full while writing {run_dir / 'checkpoints' / 'x'} (")
    start_over = "" if saved else " --start-over"
    assert line.endswith(f"free some space, then resume with --resume {run_dir}{start_over}")


# Errors raised after TensorFlow is imported (TF writes its C++ start-up lines then), one per
# entry point: (entry, arguments, text the one line must hold).
AFTER_TENSORFLOW = [
    ("train", base("--set", "env.id=no_such_game"), "unknown Atari game 'no_such_game'"),
    ("train", base("--set", "noise.size=1000"), "noise.size: 1,000 is smaller than"),
    ("play", ("{tmp}/badgame",), "unknown Atari game 'no_such_game'"),
    ("evaluate", ("{tmp}/badgame", "--current"), "unknown Atari game 'no_such_game'"),
    ("plot", ("{tmp}/maze", "{tmp}/nothing", "--archive", "-o", "{tmp}/x.png"), "no checkpoint"),
]

# Runs an entry point's main as ``python -m`` would, then reports on stdout whether TensorFlow
# was imported, which is the premise of each case.
RUN_MAIN = """
import sys
from neuroevo.cli import {entry}
code = {entry}.main(sys.argv[1:])
print("tensorflow imported:", "tensorflow" in sys.modules)
sys.exit(code)
"""


@pytest.fixture(scope="module")
def after_tf_runs(tmp_path_factory) -> Path:
    """A run whose game does not exist (with an elite to play) and a maze run with a novelty
    archive (drawing it imports TensorFlow)."""
    tmp = tmp_path_factory.mktemp("after_tf")
    (tmp / "noise").mkdir()
    bad = load_config(TINY, [NOISE.format(tmp=tmp), "env.id=no_such_game"])
    (tmp / "badgame").mkdir()
    save_config(bad, tmp / "badgame" / "config.yaml")
    RunDir(tmp / "badgame").save_elite({"init_index": 0}, np.zeros(8, np.float32))
    maze = load_config(TINY, ["env.kind=maze", "env.id=hard", "model.name=mlp"])
    (tmp / "maze").mkdir()
    save_config(maze, tmp / "maze" / "config.yaml")
    archive = {"archive.behaviors": [[1.0, 2.0]], "archive.generations": [0]}
    checkpoint.save_checkpoint(tmp / "maze" / "checkpoints", 1, {"optimizer": archive}, keep=1)
    return tmp


@pytest.mark.parametrize(("entry", "args", "message"), AFTER_TENSORFLOW, ids=lambda v: str(v)[:60])
def test_an_error_after_tensorflow_is_imported_is_all_of_a_real_stderr(
    entry, args, message, after_tf_runs: Path
) -> None:
    """In a real process, on any CPU: TensorFlow's C++ start-up lines (the absl banner, the
    oneDNN notice on AVX-512 machines) must not precede the one ``error:`` line."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    argv = [arg.format(tmp=after_tf_runs) for arg in args]
    done = subprocess.run(
        [sys.executable, "-c", RUN_MAIN.format(entry=entry), *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=after_tf_runs,
        timeout=600,
    )
    assert "tensorflow imported: True" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and done.stderr == lines[0] + "\n", done.stderr
    assert lines[0].startswith("error: ") and message in lines[0]


def test_doctor_writes_nothing_to_stderr(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["NEUROEVO_CACHE"] = str(tmp_path)  # nothing built there: doctor only reports
    done = subprocess.run(
        [sys.executable, "-m", "neuroevo.doctor"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "GPUs" in done.stdout and done.stderr == ""


GIB = 1 << 30


@pytest.mark.parametrize(
    ("limit", "args", "message"),
    [
        (
            1 * GIB,
            ("train", *base()),
            "starting TensorFlow and neuroevo's op libraries needs 2.0 GiB of address space but "
            "this process may map only 1.0 GiB (ulimit -v)",
        ),
        (1.5 * GIB, ("play", "{tmp}/badgame"), "needs 2.0 GiB of address space"),
        (1.5 * GIB, ("evaluate", "{tmp}/badgame"), "needs 2.0 GiB of address space"),
        (1 * GIB, ("doctor",), "needs 2.0 GiB of address space"),
        (
            6 * GIB,
            ("train", *base("--set", "evaluator.workers=1000")),
            "lower noise.size or evaluator.workers",
        ),
    ],
    ids=["train-1GiB", "play-1.5GiB", "evaluate-1.5GiB", "doctor-1GiB", "train-1000-workers-6GiB"],
)
def test_an_address_space_limit_is_one_line_naming_the_need(
    limit, args, message, after_tf_runs: Path
) -> None:
    """``ulimit -v`` too low for TensorFlow, or for a run's threads: refused before TensorFlow
    starts (it would abort or fail inside its own code)."""
    import resource

    entry, *argv = (arg.format(tmp=after_tf_runs) for arg in args)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", f"neuroevo.{entry}", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=after_tf_runs,
        timeout=600,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit))),
    )
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not (after_tf_runs / "new").exists()


def test_a_run_whose_config_imports_a_module_is_used_only_with_allow_imports(
    tmp_path, monkeypatch, capsys
) -> None:
    """A config naming a module is code: ``play``, ``evaluate`` and ``--resume`` of such a run
    refuse in one line naming the module, and import nothing, unless ``--allow-imports``."""

    import neuroevo as ne

    marker = tmp_path / "imported"
    module = tmp_path / "modules" / "planted_behaviour.py"
    module.parent.mkdir()
    module.write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n\n"
        "def position(obs, info):\n    return obs[:2]\n"
    )
    monkeypatch.syspath_prepend(str(module.parent))
    run = tmp_path / "run"
    overrides = {
        **SMALL_CARTPOLE,
        "budget.generations": 1,
        "noise.cache_dir": str(tmp_path / "noise"),
        "env.gym.behavior": "planted_behaviour:position",
    }
    ne.train({}, overrides, run_dir=run)

    def as_received() -> None:  # as in a new process: nothing imported or run yet
        marker.unlink(missing_ok=True)
        monkeypatch.delitem(sys.modules, "planted_behaviour", raising=False)

    refusals = [
        (play.main, [str(run)]),
        (evaluate.main, [str(run), "--episodes", "2"]),
        (train.main, ["--resume", str(run), "--quiet", "--set", "budget.generations=2"]),
    ]
    for main, argv in refusals:
        as_received()
        capsys.readouterr()
        assert main(argv) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line == (
            f"error: {run / 'config.yaml'} names Python modules to import, and importing runs "
            "their code: planted_behaviour (env.gym.behavior); pass --allow-imports if you "
            "trust this run"
        )
        assert not marker.exists()
    as_received()
    assert play.main([str(run), "--episodes", "1", "--allow-imports"]) == 0
    assert marker.read_text() == "ran"


def test_a_fifo_as_config_is_refused_at_once(tmp_path) -> None:
    """Opening a FIFO for reading waits for a writer: the config is opened without blocking and
    refused as not a regular file (a real process, so a hang fails on the guard, not forever)."""
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "neuroevo.train", "--config", str(fifo)],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == f"error: config file '{fifo}' is not a regular file; give a YAML file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]
