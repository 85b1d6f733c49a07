"""Tests of neuroevo.run.checkpoints: round trips, corruption fallback, pruning, crash safety."""

import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from neuroevo.run.checkpoints import (
    CheckpointError,
    checkpoint_file,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)

REPO = Path(__file__).resolve().parents[2]


def random_state(rng: np.random.Generator) -> dict:
    """A nested state with arrays of several dtypes and shapes and every kind of plain leaf."""
    n = int(rng.integers(1, 50))
    return {
        "generation": int(rng.integers(0, 10**6)),
        "algorithm": "ga",
        "best": -math.inf,
        "score": float(rng.normal()),
        "note": "ünïcode ✓",
        "nothing": None,
        "flag": True,
        "optimizer": {
            "center": rng.normal(size=n).astype(np.float32),
            "adam.m": rng.normal(size=(n, 3)),
            "steps": np.int64(rng.integers(1, 100)),
            "nested": {"deep": {"mask": rng.random(n) < 0.5}},
            "empty": {},
        },
        "genomes": {
            "seeds": rng.integers(0, 2**31, size=(n, 4), dtype=np.int64),
            "sigmas": rng.random(n).astype(np.float16),
            "small": rng.integers(-128, 127, size=n, dtype=np.int8),
            "counts": rng.integers(0, 60000, size=n, dtype=np.uint16),
            "complex": (rng.normal(size=2) + 1j).astype(np.complex64),
            "scalar": np.array(3.5),
            "none_yet": np.zeros((0, 3), dtype=np.float32),
            "fortran": np.asfortranarray(rng.normal(size=(3, 4))),
            "strided": rng.normal(size=20)[::3],
        },
        "history": [1, 2.5, "x", None, [True, False]],
        "chain": (7, (1, 0.002), (9, 0.002)),
    }


def assert_same(restored: object, original: object, path: str = "") -> None:
    if isinstance(original, np.ndarray):
        assert isinstance(restored, np.ndarray), path
        assert restored.dtype == original.dtype and restored.shape == original.shape, path
        np.testing.assert_array_equal(restored, original, err_msg=path)
    elif isinstance(original, dict):
        assert isinstance(restored, dict) and sorted(restored) == sorted(original), path
        for key in original:
            assert_same(restored[key], original[key], f"{path}/{key}")
    elif isinstance(original, (list, tuple)):
        assert isinstance(restored, list) and len(restored) == len(original), path
        for i, (a, b) in enumerate(zip(restored, original, strict=True)):
            assert_same(a, b, f"{path}/{i}")
    elif isinstance(original, np.generic):
        assert type(restored) is type(original.item()) and restored == original.item(), path
    else:
        assert type(restored) is type(original) and restored == original, path


def test_round_trip_of_nested_state(tmp_path, rng):
    state = random_state(rng)
    path = save_checkpoint(tmp_path, 12, state, keep=3)
    assert path == tmp_path / "ckpt-000012"
    assert sorted(p.name for p in path.iterdir()) == ["MANIFEST", "arrays.npz", "state.yaml"]
    assert_same(load_checkpoint(path), state)
    step, latest = latest_checkpoint(tmp_path)
    assert step == 12
    assert_same(latest, state)
    # The manifest is in sha256sum format so it can be checked by hand.
    assert subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST"], cwd=path).returncode == 0


def test_refuses_state_that_would_need_pickle(tmp_path):
    with pytest.raises(TypeError, match="object arrays"):
        save_checkpoint(tmp_path, 0, {"a": np.array([{}, 1], dtype=object)}, keep=1)
    with pytest.raises(TypeError, match="'x/1': numpy arrays may only be dict values"):
        save_checkpoint(tmp_path, 0, {"x": [1, np.zeros(2)]}, keep=1)
    with pytest.raises(TypeError, match="'f': set is neither plain data nor an array"):
        save_checkpoint(tmp_path, 0, {"f": {1, 2}}, keep=1)
    with pytest.raises(ValueError, match="'a/b' under 'o' must be"):
        save_checkpoint(tmp_path, 0, {"o": {"a/b": 1}}, keep=1)
    with pytest.raises(ValueError, match="step must be"):
        save_checkpoint(tmp_path, -1, {}, keep=1)
    assert latest_checkpoint(tmp_path) is None
    assert latest_checkpoint(tmp_path / "missing") is None


def truncate_npz(path: Path) -> None:
    npz = path / "arrays.npz"
    npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])


def flip_yaml_bytes(path: Path) -> None:
    data = bytearray((path / "state.yaml").read_bytes())
    data[len(data) // 2] ^= 0x55
    (path / "state.yaml").write_bytes(bytes(data))


def delete_manifest(path: Path) -> None:
    (path / "MANIFEST").unlink()


def leftover_temp_dir(path: Path) -> None:
    # An interrupted save of a newer step leaves only its hidden temp directory.
    shutil.copytree(path, path.with_name(".ckpt-000003.saving"))
    shutil.rmtree(path)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (truncate_npz, "arrays.npz does not match its sha256"),
        (flip_yaml_bytes, "state.yaml does not match its sha256"),
        (delete_manifest, "MANIFEST is missing"),
        (leftover_temp_dir, "left by an interrupted save"),
    ],
)
def test_damaged_checkpoint_is_skipped_with_a_warning(tmp_path, damage, reason):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, {"step": step, "w": np.full(100, step)}, keep=5)
    damage(tmp_path / "ckpt-000003")
    with pytest.warns(UserWarning, match=reason) as record:
        step, state = latest_checkpoint(tmp_path)
    assert step == 2 and state["step"] == 2 and (state["w"] == 2).all()
    assert "ckpt-000003" in str(record[0].message)
    if damage is not leftover_temp_dir:
        with pytest.raises(CheckpointError, match=reason):
            load_checkpoint(tmp_path / "ckpt-000003")


def test_keeps_the_newest_and_drops_abandoned_ones(tmp_path):
    for step in range(6):
        save_checkpoint(tmp_path, step, {"step": step}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000004", "ckpt-000005"]
    # Resuming from step 4 abandons 5: saving 5 again replaces it, saving 4 deletes it.
    save_checkpoint(tmp_path, 5, {"step": 5, "again": True}, keep=2)
    assert latest_checkpoint(tmp_path)[1] == {"step": 5, "again": True}
    (tmp_path / ".ckpt-000009.saving").mkdir()  # left by a killed process
    save_checkpoint(tmp_path, 3, {"step": 3}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000003"]
    save_checkpoint(tmp_path, 1_234_567, {"step": 1_234_567}, keep=2)
    assert latest_checkpoint(tmp_path)[0] == 1_234_567


WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from neuroevo.run.checkpoints import save_checkpoint

    run_dir = sys.argv[1]
    for step in range(10**6):
        state = {"step": step, "a": {"w": np.arange(200_000, dtype=np.float64) * step}}
        save_checkpoint(run_dir, step, state, keep=2)
        print(step, flush=True)
    """
)


def test_sigkill_while_saving_never_leaves_garbage(tmp_path, rng):
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    for trial in range(3):
        run_dir = tmp_path / str(trial)
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(run_dir)], stdout=subprocess.PIPE, env=env, text=True
        )
        writer.stdout.readline()  # wait until at least one checkpoint exists
        time.sleep(float(rng.uniform(0.0, 0.3)))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        writer.stdout.close()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step, state = latest_checkpoint(run_dir)
        # Only a hidden temp directory may be left behind, never a damaged ckpt-* one.
        assert all("interrupted save" in str(w.message) for w in caught), caught
        assert state["step"] == step
        np.testing.assert_array_equal(state["a"]["w"], np.arange(200_000) * float(step))


def test_skipped_checkpoints_are_listed_for_the_caller_instead_of_warned(tmp_path) -> None:
    save_checkpoint(tmp_path, 1, {"x": 1}, keep=3)
    newest = save_checkpoint(tmp_path, 2, {"x": 2}, keep=3)
    (newest / "MANIFEST").unlink()
    (tmp_path / ".ckpt-000003.saving").mkdir()
    skipped: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step, state = latest_checkpoint(tmp_path, skipped)
    assert (step, state) == (1, {"x": 1})
    assert skipped == [
        ".ckpt-000003.saving: left by an interrupted save",
        "ckpt-000002: MANIFEST is missing (incomplete save)",
    ]


def test_a_plain_file_named_like_a_checkpoint_is_reported_then_moved_aside(tmp_path):
    save_checkpoint(tmp_path, 7, {"step": 7}, keep=3)
    stray = tmp_path / "ckpt-000008"
    stray.write_text("someone's notes")
    skipped: list[str] = []
    assert latest_checkpoint(tmp_path, skipped)[0] == 7
    assert skipped == ["ckpt-000008: not a directory (the next save of this step moves it aside)"]
    with pytest.warns(UserWarning, match="ckpt-000008' is not a checkpoint directory"):
        save_checkpoint(tmp_path, 8, {"step": 8}, keep=3)
    shutil.rmtree(stray)
    stray.write_text("again")  # a second stray of that name gets a name of its own
    with pytest.warns(UserWarning, match=r"not-a-checkpoint\.1"):
        save_checkpoint(tmp_path, 8, {"step": 8}, keep=3)
    save_checkpoint(tmp_path, 9, {"step": 9}, keep=3)  # later saves keep working
    assert latest_checkpoint(tmp_path)[1] == {"step": 9}
    assert (tmp_path / "ckpt-000008.not-a-checkpoint").read_text() == "someone's notes"
    assert (tmp_path / "ckpt-000008.not-a-checkpoint.1").read_text() == "again"


def test_files_saved_with_a_checkpoint_are_in_its_manifest_and_read_back(tmp_path):
    source = tmp_path / "elite.npz"
    source.write_bytes(b"elite of generation 3")
    path = save_checkpoint(tmp_path / "c", 3, {"x": 1}, keep=2, files={"elite.npz": source})
    assert "  elite.npz\n" in (path / "MANIFEST").read_text()
    assert subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST"], cwd=path).returncode == 0
    assert checkpoint_file(path, "elite.npz").read_bytes() == b"elite of generation 3"
    assert checkpoint_file(path, "best.npz") is None
    for bad in ("../x.npz", "state.yaml", "arrays.npz", "x.txt"):
        with pytest.raises(ValueError, match="plain"):
            save_checkpoint(tmp_path / "c", 4, {}, keep=2, files={bad: source})


def test_a_replaced_policy_file_leaves_the_checkpoint_copy_intact(tmp_path):
    """The trainer replaces elite.npz by rename, so the hard link keeps the saved version."""
    source = tmp_path / "elite.npz"
    source.write_bytes(b"generation 3")
    path = save_checkpoint(tmp_path / "c", 3, {"x": 1}, keep=2, files={"elite.npz": source})
    (tmp_path / ".elite.npz.tmp").write_bytes(b"generation 4")
    os.replace(tmp_path / ".elite.npz.tmp", source)
    assert (path / "elite.npz").read_bytes() == b"generation 3"
    assert load_checkpoint(path) == {"x": 1}
    (path / "elite.npz").write_bytes(b"tampered")
    with pytest.raises(CheckpointError, match=r"elite\.npz does not match its sha256"):
        load_checkpoint(path)


def test_a_checkpoint_the_validator_rejects_is_skipped_with_its_reason(tmp_path):
    save_checkpoint(tmp_path, 1, {"counters": {"frames": 10}}, keep=3)
    save_checkpoint(tmp_path, 2, {"counters": {"frames": "ten"}}, keep=3)

    def validate(path: Path, state: dict) -> None:
        if not isinstance(state["counters"]["frames"], int):
            raise CheckpointError(f"{path.name}: counters.frames is not an int")

    skipped: list[str] = []
    step, state = latest_checkpoint(tmp_path, skipped, validate)
    assert (step, state) == (1, {"counters": {"frames": 10}})
    assert skipped == ["ckpt-000002: ckpt-000002: counters.frames is not an int"]
