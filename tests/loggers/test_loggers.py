"""The W&B and MLflow trackers, with no network: W&B in offline mode (its run file read back
here) and MLflow on a local file store. What they receive must equal metrics.csv."""

from __future__ import annotations

import csv
import json
import struct
from pathlib import Path

import pytest
import yaml

from neuroevo.cli import train
from neuroevo.config.schema import load_config
from neuroevo.core import extras
from neuroevo.loggers import IDS_FILE
from neuroevo.run.plan import plan
from neuroevo.run.trainer import open_run

wandb = pytest.importorskip("wandb")
mlflow = pytest.importorskip("mlflow")


@pytest.fixture(autouse=True)
def local_only(monkeypatch, tmp_path) -> None:
    """No tracker reaches the network or the user's home: W&B offline keeps its settings in
    tmp_path, MLflow's file store (in maintenance mode since MLflow 3) is allowed, and an
    unanswered HTTP request fails at once."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")


MAZE = {"kind": "maze", "id": "hard", "max_episode_steps": 40}
HOPPER = {"kind": "mujoco", "id": "Hopper-v5", "max_episode_steps": 40}


def tiny_config(tmp_path: Path, logging: dict, env: dict = MAZE) -> Path:
    """Seconds of sep-CMA-ES (8 samples, 40-step episodes) on ``env``: rows with sigma, an
    elite score and a strategy extra (h_sigma)."""
    config = {
        "seed": 2,
        "algorithm": {"name": "sep_cma_es", "sep_cma_es": {"population_size": 8}},
        "env": env,
        "model": {"name": "mlp", "mlp": {"hidden_sizes": [8]}},
        "noise": {"size": 1_000_000},
        "evaluator": {"workers": 1, "slots_per_worker": 8},
        "budget": {"generations": 2},
        "logging": {"progress": False, "tensorboard": False, **logging},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def csv_rows(run_dir: Path) -> list[dict[str, float]]:
    """metrics.csv as numbers, empty cells left out."""
    with (run_dir / "metrics.csv").open() as handle:
        return [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(handle)]


def wandb_records(run_file: Path):
    """The protobuf records of a W&B run file (``run-<id>.wandb``): a 7-byte header, then
    LevelDB-log framing in 32 KiB blocks (per chunk: crc32, length, type FULL/FIRST/MIDDLE/
    LAST)."""
    from wandb.proto import wandb_internal_pb2

    data, block, position, chunks = run_file.read_bytes(), 32768, 7, b""
    assert data[:4] == b":W&B"
    while position + 7 <= len(data):
        left = block - position % block
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if left < 7 or (length == 0 and kind == 0):
            position += left
            continue
        chunks += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            chunks = b""
            yield record


def wandb_logged(wandb_dir: Path) -> tuple[dict, list[dict], list[str]]:
    """(config, history rows without W&B's own keys, artifact file names) of the W&B runs
    under ``wandb_dir``, oldest first."""
    config, rows, files = {}, [], []
    for run_file in sorted(wandb_dir.glob("wandb/offline-run-*/run-*.wandb")):
        for record in wandb_records(run_file):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                config |= {i.key: json.loads(i.value_json) for i in record.run.config.update}
            elif kind == "history":
                items = {
                    i.key or "/".join(i.nested_key): json.loads(i.value_json)
                    for i in record.history.item
                }
                rows.append({k: v for k, v in items.items() if not k.startswith("_")})
            elif kind == "artifact":
                files += [entry.path for entry in record.artifact.manifest.contents]
    return config, rows, files


def test_a_hopper_run_logs_its_csv_config_and_policies_to_wandb_and_mlflow(tmp_path) -> None:
    """A Hopper run (the MuJoCo op): every CSV value reaches both trackers at the frames step,
    the config is the W&B config and MLflow's parameters, the policies are artifacts; a resume
    continues the same runs."""
    store = tmp_path / "mlruns"
    logging = {
        "wandb": {"project": "tests", "tags": ["tiny"], "offline": True, "dir": str(tmp_path)},
        "mlflow": {"tracking_uri": store.as_uri(), "experiment": "tests", "tags": {"k": "v"}},
    }
    cfg = load_config(tiny_config(tmp_path, logging, HOPPER))
    run_dir = tmp_path / "run"
    trainer = open_run(plan(cfg, run_dir), quiet=True)
    trainer.train()
    resumed = load_config(tiny_config(tmp_path, logging, HOPPER), ["budget.generations=3"])
    open_run(plan(resumed, run_dir, resume=True), quiet=True).train()
    expected = csv_rows(run_dir)
    assert [row["generation"] for row in expected] == [0, 1, 2]
    assert {"sigma", "elite_score", "h_sigma", "wall_time_s"} <= set(expected[0])

    config, rows, files = wandb_logged(tmp_path)
    assert config["algorithm"]["sep_cma_es"]["population_size"] == 8
    assert config["env"]["id"] == "Hopper-v5"
    assert rows == [{k: pytest.approx(v, rel=1e-12) for k, v in row.items()} for row in expected]
    assert sorted(files) == ["best.npz", "best.npz", "elite.npz", "elite.npz"]  # both ends

    client = mlflow.tracking.MlflowClient(store.as_uri())
    ids = yaml.safe_load((run_dir / IDS_FILE).read_text())
    run = client.get_run(ids["mlflow"])
    assert run.info.status == "FINISHED" and run.data.tags["k"] == "v"
    assert run.data.params["algorithm.sep_cma_es.population_size"] == "8"
    assert run.info.run_name == "run"
    for key in expected[0]:
        history = client.get_metric_history(run.info.run_id, key)
        by_step = {point.step: point.value for point in history}  # a resume re-logs a row
        assert by_step == {int(row["frames"]): pytest.approx(row[key]) for row in expected}
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "policy")}
    assert artifacts == {"policy/elite.npz", "policy/best.npz"}


def test_a_missing_package_is_one_error_line_before_the_run(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(extras.EXTRAS, "wandb", ("a_module_that_is_not_installed",))
    config = tiny_config(tmp_path, {"wandb": {"offline": True, "dir": str(tmp_path)}})
    run_dir = tmp_path / "run"
    assert train.main(["--config", str(config), "--run-dir", str(run_dir), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: logging.wandb needs")
    assert 'pip install "neuroevo[wandb]"' in err
    assert not run_dir.exists()


def test_an_unreachable_server_is_one_error_line_before_the_run(tmp_path, capsys) -> None:
    config = tiny_config(tmp_path, {"mlflow": {"tracking_uri": "http://127.0.0.1:9"}})
    run_dir = tmp_path / "run"
    assert train.main(["--config", str(config), "--run-dir", str(run_dir), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: logging.mlflow cannot start")
    assert not run_dir.exists()


def test_a_tracker_failing_mid_run_is_one_warning_and_training_goes_on(
    tmp_path, monkeypatch
) -> None:
    from neuroevo.loggers.mlflow import MlflowTracker

    def unreachable(self, step, values) -> None:
        raise ConnectionError("the tracking server went away")

    monkeypatch.setattr(MlflowTracker, "scalars", unreachable)
    store = tmp_path / "mlruns"
    cfg = load_config(tiny_config(tmp_path, {"mlflow": {"tracking_uri": store.as_uri()}}))
    trainer = open_run(plan(cfg, tmp_path / "run"), quiet=True)
    with pytest.warns(RuntimeWarning, match="logging.mlflow failed .*goes on") as caught:
        trainer.train()
    assert len([w for w in caught if "logging.mlflow" in str(w.message)]) == 1
    assert [row["generation"] for row in csv_rows(tmp_path / "run")] == [0, 1]
