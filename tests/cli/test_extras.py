"""What a user who ran ``pip install .`` meets: extras named before any work, the console
script, and plots that show short runs and count MuJoCo steps as steps."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from neuroevo.cli import play, plot
from neuroevo.core import extras
from neuroevo.run import plots, policy

ROOT = Path(__file__).resolve().parents[2]


def hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Makes ``extras.require`` see ``modules`` as not installed."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        extras.importlib.util,
        "find_spec",
        lambda name, *args: None if name in modules else find_spec(name, *args),
    )


def fake_run(tmp_path: Path, kind: str, generations: int) -> Path:
    """A run directory with a config of env kind ``kind`` and ``generations`` metric rows."""
    run = tmp_path / f"{kind}-run"
    run.mkdir()
    config = yaml.safe_load((ROOT / "configs" / "quick_atari.yaml").read_text())
    config["env"]["kind"] = kind
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    rows = ["frames,wall_time_s,best,mean,elite_score"]
    rows += [f"{1000 * (g + 1)},{60 * (g + 1)},{g + 5},{g},{g + 4}" for g in range(generations)]
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")
    return run


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path, capsys) -> None:
    hide(monkeypatch, "matplotlib")
    run = fake_run(tmp_path, "atari", 2)
    assert plot.main([str(run), "-o", str(tmp_path / "curves.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: python -m neuroevo.plot needs matplotlib, which is not installed: "
        'pip install "neuroevo[plot]"'
    )
    assert not (tmp_path / "curves.png").exists()


def test_play_video_without_imageio_fails_before_any_episode(monkeypatch, tmp_path, capsys):
    hide(monkeypatch, "imageio")
    run = fake_run(tmp_path, "atari", 1)
    (run / "elite.npz").write_bytes(b"")  # never read: the check comes first

    def no_episodes(*args, **kwargs):
        raise AssertionError("an episode ran before the missing extra was reported")

    monkeypatch.setattr(policy, "evaluate_elite", no_episodes)
    assert play.main([str(run), "--video", str(tmp_path / "elite.mp4")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        'error: --video needs imageio, which is not installed: pip install "neuroevo[video]"'
    ]


def test_one_generation_mujoco_run_is_drawn_with_markers_in_env_steps(tmp_path) -> None:
    figure = plots.draw_runs([fake_run(tmp_path, "mujoco", 1)])
    by_frames = figure.axes[0]
    assert by_frames.get_xlabel() == "env steps"
    lines = by_frames.get_lines()
    assert len(lines) == 3 and all(line.get_marker() == "o" for line in lines)
    assert [list(line.get_xdata()) for line in lines] == [[1000.0]] * 3
    atari = plots.draw_runs([fake_run(tmp_path, "atari", 60)])
    assert atari.axes[0].get_xlabel() == "emulator frames"
    assert all(line.get_marker() in (None, "None") for line in atari.axes[0].get_lines())


@pytest.mark.slow
def test_wheel_installs_the_console_script(tmp_path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("neuroevo", "custom_ops", "configs"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    build = ["pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run(
        [sys.executable, "-m", *build, "-w", str(tmp_path / "dist"), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("neuroevo-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in archive.namelist() if n.endswith("entry_points.txt")]
        text = archive.read(entry_points).decode()
    assert "[console_scripts]" in text
    assert "neuroevo-train = neuroevo.cli.train:main" in text
