"""Paper fidelity: every shipped config starts, one ES update equals the starter's formulas,
a virtual-batch-norm run trains, resumes after SIGKILL and replays, best.npz and the test
protocol (``python -m neuroevo.evaluate``)."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from run_helpers import search_rows, train_and_kill

from neuroevo.algorithms import ES, ESParams
from neuroevo.config.schema import load_config
from neuroevo.genomes.noise import NoiseTable
from neuroevo.run.policy import evaluate_elite, load_policy
from neuroevo.run.run_dir import RunDir

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml")) + sorted(
    (ROOT / "configs" / "reproduce").glob("*.yaml")
)
"""Every shipped config: the paper configs and the recipes of ``python -m benchmarks reproduce``."""
TINY = ROOT / "configs" / "tiny_atari.yaml"


def shrunk(path: Path) -> list[str]:
    """Overrides that run ``path`` for one tiny generation and test its best elite."""
    cfg = load_config(path)
    section = f"algorithm.{cfg.algorithm.name}"
    overrides = [
        f"{section}.population_size=4",
        "env.max_episode_steps=15",
        "noise.size=5000000",  # above the largest network's 4.05M parameters
        "evaluator.workers=1",
        "evaluator.slots_per_worker=4",
        "budget.generations=1",
        "budget.frames=null",
        "budget.hours=null",
        "logging.tensorboard=false",
        "logging.progress=false",
        "test.at_end=true",
        "test.episodes=2",
        "test.max_episode_steps=15",
    ]
    params = cfg.algorithm.selected
    fields = {field.name for field in dataclasses.fields(params)}
    if "center_episodes" in fields:
        overrides.append(f"{section}.center_episodes=1")
    if getattr(params, "validation_candidates", 0):  # GA-NS selects by novelty: none
        overrides += [f"{section}.validation_candidates=2", f"{section}.validation_episodes=1"]
    if "truncation" in fields:
        overrides.append(f"{section}.truncation=2")
    if "top_directions" in fields:  # ARS: at most the 2 directions of 4 perturbations
        overrides.append(f"{section}.top_directions=1")
    if "emitters" in fields:  # CMA-ME / CMA-MAE: 2 samples per emitter
        overrides.append(f"{section}.emitters=2")
    return overrides


@pytest.mark.parametrize(
    "path", CONFIGS, ids=[str(p.relative_to(ROOT / "configs").with_suffix("")) for p in CONFIGS]
)
def test_every_shipped_config_runs_a_generation(path: Path, tmp_path) -> None:
    from neuroevo.run.plan import plan
    from neuroevo.run.trainer import open_run

    cfg = load_config(path, shrunk(path))
    open_run(plan(cfg, tmp_path / "run"), quiet=True).train()
    run = RunDir(tmp_path / "run")
    with run.metrics_path.open() as handle:
        (row,) = csv.DictReader(handle)
    assert float(row["best_elite_score"]) == float(row["elite_score"])
    assert json.loads(run.test_path.read_text())["episodes"] == 2
    assert float(row["test_mean"]) == json.loads(run.test_path.read_text())["mean"]


def starter_centered_ranks(x: np.ndarray) -> np.ndarray:
    """``compute_centered_ranks`` of OpenAI's evolution-strategies-starter, written out."""
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[x.argsort()] = np.arange(len(x))
    return ranks / (len(x) - 1) - 0.5


def test_one_es_update_equals_the_starters_formulas() -> None:
    noise = NoiseTable(seed=1, size=10_000, cache_dir=False)
    params = ESParams(population_size=6, sigma=0.1, learning_rate=0.05, l2_coeff=0.3)
    es = ES(5, 1.0, noise, seed=3, params=params)
    theta = es.center.astype(np.float64)
    request = es.ask()
    returns = np.array([[3.0], [-1.0], [0.5], [7.0], [2.0], [2.5]])
    es.tell(request, returns)
    # Starter: noise_inds_n, returns_n2 (+, -), centred ranks over all 2n returns,
    # g = sum_i (r+_i - r-_i) eps_i / returns_n2.size, update(-g + l2 * theta) with Adam.
    eps = np.stack([noise.get(g.noise_index, 5) for g in request.genomes[0::2]]).astype(np.float64)
    ranks = starter_centered_ranks(returns[:, 0]).reshape(3, 2)
    g = (ranks[:, 0] - ranks[:, 1]) @ eps / 6
    globalg = -g + 0.3 * theta
    m = 0.1 * globalg
    v = 0.001 * globalg**2
    a = 0.05 * np.sqrt(1 - 0.999) / (1 - 0.9)
    expected = theta - a * m / (np.sqrt(v) + 1e-8)
    np.testing.assert_allclose(es.center, expected, rtol=1e-5, atol=1e-6)


def cli(module: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)


VBN_ES = [
    "--config",
    str(TINY),
    "--set",
    "algorithm.name=es",
    "--set",
    "algorithm.es.population_size=6",
    "--set",
    "model.virtual_batch_norm=true",
    "--set",
    "logging.tensorboard=false",
    "--quiet",
]


@pytest.fixture(scope="module")
def vbn_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("vbn") / "reference"
    done = cli("neuroevo.train", *VBN_ES, "--run-dir", str(run_dir))
    assert done.returncode == 0, done.stderr
    return run_dir


def test_vbn_run_resumes_after_sigkill_identically(vbn_run: Path, tmp_path) -> None:
    run_dir = tmp_path / "killed"
    train_and_kill(list(VBN_ES), run_dir, 1)
    resumed = cli("neuroevo.train", "--resume", str(run_dir), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert search_rows(run_dir) == search_rows(vbn_run)
    for best in (False, True):
        _, expected = load_policy(RunDir(vbn_run), best)
        _, policy = load_policy(RunDir(run_dir), best)
        np.testing.assert_array_equal(policy.weights, expected.weights)
        np.testing.assert_array_equal(policy.reference_batch, expected.reference_batch)


def test_vbn_elite_replays_its_score(vbn_run: Path) -> None:
    cfg = load_config(vbn_run / "config.yaml")
    _, policy = load_policy(RunDir(vbn_run))
    assert policy.reference_batch.shape == (128, 84, 84, 4)
    last = search_rows(vbn_run)[-1]
    # The ES centre of the last generation was scored on one episode of the centre stream.
    generation = int(last["generation"])
    seed = np.random.default_rng([cfg.seed, generation, 5]).integers(0, 2**31, size=(1, 1))
    replayed = evaluate_elite(cfg, policy, seed.reshape(-1))
    assert replayed[0] == float(last["elite_score"])


def test_best_npz_holds_the_best_validated_elite(vbn_run: Path) -> None:
    scores = [float(r["elite_score"]) for r in search_rows(vbn_run)]
    assert [float(r["best_elite_score"]) for r in search_rows(vbn_run)] == list(
        np.maximum.accumulate(scores)
    )
    genome, _ = load_policy(RunDir(vbn_run), best=True)
    assert genome["score"] == max(scores) and genome["generation"] == int(np.argmax(scores))


def test_evaluate_cli_scores_the_best_elite(vbn_run: Path) -> None:
    done = cli("neuroevo.evaluate", str(vbn_run), "--episodes", "3", "--max-steps", "40")
    assert done.returncode == 0, done.stderr
    result = json.loads((vbn_run / "test.json").read_text())
    returns = np.array(result["returns"])
    assert returns.shape == (3,) and result["policy"] == "best" and result["noop_max"] == 30
    assert result["mean"] == pytest.approx(returns.mean())
    assert result["std"] == pytest.approx(returns.std())
    assert (result["min"], result["max"]) == (returns.min(), returns.max())
    assert f"mean {result['mean']:g}" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--episodes", "0"], "error: --episodes must be >= 1, got 0"),
        (["--noop-max", "-1"], "error: --noop-max must be >= 0, got -1"),
    ],
)
def test_evaluate_cli_bad_input_exits_2(vbn_run: Path, args, message) -> None:
    done = cli("neuroevo.evaluate", str(vbn_run), *args)
    assert done.returncode == 2 and done.stderr.strip() == message


def test_evaluate_cli_without_a_run_exits_2(tmp_path) -> None:
    done = cli("neuroevo.evaluate", str(tmp_path))
    assert done.returncode == 2 and "holds no run" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
