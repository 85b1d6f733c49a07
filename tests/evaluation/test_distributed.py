"""The Ray evaluator on a local two-node cluster (``ray.cluster_utils.Cluster``, one CPU per
node) against the local ``Evaluator`` on the same genomes and seeds: results must be equal,
also when an actor is killed mid-generation and when a node joins between generations."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from benchmarks.cluster_sim import wire_bytes  # noqa: E402
from neuroevo.algorithms import make_algorithm  # noqa: E402
from neuroevo.config.schema import load_config  # noqa: E402
from neuroevo.evaluation import EvalRequest, EvaluationError, Evaluator  # noqa: E402
from neuroevo.evaluation.chunking import ChunkPolicy  # noqa: E402
from neuroevo.evaluation.ray import (  # noqa: E402
    ClusterConnectionError,
    ClusterEvalStats,
    ClusterProgress,
    RayEvaluator,
)
from neuroevo.evaluation.results import EPISODE_FIELDS  # noqa: E402
from neuroevo.genomes.genome import ESGenome, GAGenome, GenomeDecoder  # noqa: E402
from neuroevo.genomes.noise import NoiseTable  # noqa: E402
from neuroevo.run.assemble import NodeFactory  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NOISE = {"noise_seed": 3, "noise_size": 1 << 16}
CARTPOLE = [
    "env.kind=gym",
    "env.id=CartPole-v1",
    "env.gym.threads=1",
    "model.name=mlp",
    "model.mlp.hidden_sizes=[8]",
    "model.mlp.observation_normalization=true",
]
"""A small observation-normalising MLP on CartPole."""
CONFIG = load_config(
    None,
    [
        *CARTPOLE,
        f"noise.seed={NOISE['noise_seed']}",
        f"noise.size={NOISE['noise_size']}",
        "budget.generations=1",
    ],
)
FACTORY = NodeFactory(CONFIG, num_slots=4)
MAX_STEPS = 60
SMALL_CHUNKS = ChunkPolicy(min_items=2, max_items=4)


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes of one CPU each, in their own temp dir; the test process is the driver."""
    temp = tempfile.mkdtemp(prefix="neuroevo-ray-", dir="/tmp")  # short: Ray's socket paths
    old = {name: os.environ.get(name) for name in ("RAY_TMPDIR", "RAY_worker_niceness")}
    os.environ["RAY_TMPDIR"] = temp
    # Actors at the test's priority: at Ray's default niceness 15 a machine busy with anything
    # else starves them, and the module took over 30 minutes with one core busy.
    os.environ["RAY_worker_niceness"] = "0"  # noqa: SIM112 - Ray reads this case
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    # Actors import this checkout's neuroevo also when it is not installed.
    ray.init(address=cluster.address, runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def local():
    """The reference: the same factory's parts under a local evaluator in this process."""
    parts = FACTORY()
    with Evaluator(parts.env, parts.model, parts.decoder.decode_batch) as evaluator:
        yield parts, evaluator


@pytest.fixture(scope="module")
def remote(cluster):
    with RayEvaluator(FACTORY, policy=SMALL_CHUNKS, max_restarts=2) as evaluator:
        yield evaluator


def ga_genomes(count: int) -> list[GAGenome]:
    rng = np.random.default_rng(0)
    return [
        GAGenome(int(rng.integers(1000)), ((int(rng.integers(1000)), 0.5),)) for _ in range(count)
    ]


def seeds_for(genomes: int, episodes: int) -> np.ndarray:
    return (np.arange(genomes * episodes, dtype=np.int64) * 11 + 5).reshape(genomes, episodes)


def assert_same_results(got, want) -> None:
    for key in EPISODE_FIELDS:
        np.testing.assert_array_equal(getattr(got, key), getattr(want, key), err_msg=key)
    assert (got.obs_stats is None) == (want.obs_stats is None)
    if want.obs_stats is not None:
        assert got.obs_stats.count == want.obs_stats.count
        np.testing.assert_array_equal(
            got.obs_stats.state_dict()["mean"], want.obs_stats.state_dict()["mean"]
        )
        np.testing.assert_array_equal(
            got.obs_stats.state_dict()["m2"], want.obs_stats.state_dict()["m2"]
        )


def test_ga_generation_equals_the_local_evaluator(local, remote):
    _, evaluator = local
    genomes, episodes = ga_genomes(7), 2
    seeds = seeds_for(len(genomes), episodes)
    sample = np.zeros(seeds.shape, bool)
    sample[[0, 3, 6], [1, 0, 1]] = True
    want = evaluator.evaluate(EvalRequest(genomes, seeds, sample_obs=sample), max_steps=MAX_STEPS)
    reports = []
    got = remote.evaluate(
        EvalRequest(genomes, seeds, sample_obs=sample), max_steps=MAX_STEPS, progress=reports.append
    )
    assert_same_results(got, want)
    assert want.obs_stats is not None and want.returns.std() > 0  # a test that can fail
    stats = got.stats
    assert isinstance(stats, ClusterEvalStats)
    assert len(stats.nodes) == 2 and stats.episodes == seeds.size
    assert stats.frames == want.stats.frames
    assert stats.chunks >= 4 and stats.sent_bytes > 0 and stats.received_bytes > 0
    assert stats.shared_bytes == 0  # GA: nothing but seed chains
    assert isinstance(reports[-1], ClusterProgress)
    assert reports[-1].episodes_done == seeds.size
    assert sum(n.episodes for n in reports[-1].nodes) == seeds.size


def test_es_generation_and_obs_stats_equal_the_local_evaluator(local, remote):
    parts, evaluator = local
    center = np.random.default_rng(1).normal(size=parts.decoder.num_params).astype(np.float32)
    parts.decoder.set_center(9, center)
    noise = NoiseTable(NOISE["noise_seed"], NOISE["noise_size"])
    driver = GenomeDecoder(noise, parts.decoder.scales)
    driver.set_center(9, center)
    genomes = [ESGenome(9, 100 * k, sign, 0.3) for k in range(4) for sign in (1, -1)]
    seeds = seeds_for(len(genomes), 1)
    plain = evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=MAX_STEPS)
    dim = parts.env.observation_spec.shape[0]
    mean, std = np.full(dim, 0.05, np.float32), np.full(dim, 0.5, np.float32)
    parts.model.set_obs_stats(mean, std)
    remote.set_obs_stats(mean, std)
    remote.centers = driver  # the ES optimizer's decoder in a training run
    try:
        want = evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=MAX_STEPS)
        got = remote.evaluate(EvalRequest(genomes, seeds), max_steps=MAX_STEPS)
    finally:  # the other tests run with the default statistics
        parts.model.set_obs_stats(np.zeros(dim), np.ones(dim))
        remote.set_obs_stats(np.zeros(dim), np.ones(dim))
    assert not np.array_equal(want.lengths, plain.lengths)  # the statistics reached the nets
    assert_same_results(got, want)
    # The centre and the statistics went once to each of the two nodes.
    assert got.stats.shared_bytes == 2 * (center.nbytes + mean.nbytes + std.nbytes)


def test_es_without_centres_is_a_clear_error(cluster):
    with RayEvaluator(FACTORY) as evaluator, pytest.raises(ValueError, match="centers="):
        evaluator.evaluate(EvalRequest([ESGenome(0, 0, 1, 0.1)], seeds_for(1, 1)))


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"max_steps": 0}, ValueError, "max_steps must be an int >= 1"),
        ({"progress_interval_s": -1.0}, ValueError, "progress_interval_s must be >= 0"),
        ({"plain": True}, TypeError, "evaluate takes an EvalRequest"),
    ],
)
def test_bad_arguments_are_the_local_evaluators_errors(local, remote, options, error, message):
    request = EvalRequest(ga_genomes(2), seeds_for(2, 2))
    if options.pop("plain", False):
        request = request.genomes
    for evaluator in (local[1], remote):
        with pytest.raises(error, match=message):
            evaluator.evaluate(request, **options)


def test_a_failing_chunk_raises_with_the_remote_cause(remote):
    outside = GAGenome(NOISE["noise_size"] + 1)  # no such slice in the noise table
    with pytest.raises(EvaluationError, match="outside the table"):
        remote.evaluate(
            EvalRequest([outside, *ga_genomes(3)], seeds_for(4, 1)), max_steps=MAX_STEPS
        )


def test_killed_actor_loses_nothing(local, remote):
    _, evaluator = local
    genomes, episodes = ga_genomes(12), 2
    seeds = seeds_for(len(genomes), episodes)
    want = evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=MAX_STEPS)
    victim = ray.get(remote.actors[0].pid.remote())
    killed = []

    def kill_once(progress):
        if not killed:  # the first report comes while both actors hold a chunk
            os.kill(victim, signal.SIGKILL)
            killed.append(progress.episodes_done)

    got = remote.evaluate(
        EvalRequest(genomes, seeds),
        max_steps=MAX_STEPS,
        progress=kill_once,
        progress_interval_s=0.01,
    )
    assert killed and killed[0] < seeds.size
    assert got.stats.requeued >= 1
    assert_same_results(got, want)
    # Ray restarted the actor (a new process), and the next generation is still exact.
    assert ray.get(remote.actors[0].pid.options(max_task_retries=-1).remote()) != victim
    again = remote.evaluate(EvalRequest(genomes, seeds), max_steps=MAX_STEPS)
    assert_same_results(again, want)
    assert all(node.episodes > 0 for node in again.stats.nodes)  # the restarted actor works


def test_a_node_that_joins_is_used_from_the_next_generation(cluster, local, remote):
    _, evaluator = local
    genomes = ga_genomes(4)
    seeds = seeds_for(len(genomes), 1)
    want = evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=MAX_STEPS)
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    got = remote.evaluate(EvalRequest(genomes, seeds), max_steps=MAX_STEPS)
    assert_same_results(got, want)
    assert len(remote.actors) == 3


@pytest.mark.parametrize(
    ("address", "message"),
    [("127.0.0.1:1", "cannot reach the Ray cluster"), ("nonsense", "is not 'auto'")],
)
def test_bad_address_is_a_clear_error(address, message):
    with pytest.raises(ClusterConnectionError, match=message):
        RayEvaluator(FACTORY, address=address, connect_timeout_s=1.0)


@pytest.mark.parametrize(
    "name", ["pgpe", "snes", "xnes", "cem", "sep_cma_es", "cma_es", "map_elites"]
)
def test_new_strategies_genomes_evaluate_on_ray_as_locally(local, remote, name):
    """A generation of each strategy (scaled perturbations, dense samples, MAP-Elites
    children) gives the same episodes on Ray as locally; its registered vectors (centre and
    scale, or one per dense sample) reach each node once."""
    parts, evaluator = local
    noise = NoiseTable(NOISE["noise_seed"], NOISE["noise_size"])
    grid = {"cells": (3, 3), "behavior_low": (-1.0, -1.0), "behavior_high": (1.0, 1.0)}
    algorithm = make_algorithm(
        name,
        num_params=parts.decoder.num_params,
        scales=parts.decoder.scales,
        noise=noise,
        seed=2,
        population_size=6,
        **(grid if name == "map_elites" else {}),
    )
    rng = np.random.default_rng(5)
    if algorithm.needs_behavior:  # fill the archive: the next request holds children
        request = algorithm.ask()
        n = len(request.genomes)
        algorithm.tell(request, rng.normal(size=(n, 1)), behaviors=rng.uniform(-1, 1, (n, 1, 2)))
    request = algorithm.ask()
    vectors = sorted({i for g in request.genomes for i in g.vector_ids})
    for vector_id in vectors:  # the local reference decodes with the same vectors
        parts.decoder.set_center(vector_id, algorithm.decoder.center(vector_id), keep=64)
    want = evaluator.evaluate(request, max_steps=MAX_STEPS)
    remote.centers = algorithm.decoder
    try:
        got = remote.evaluate(request, max_steps=MAX_STEPS)
    finally:
        remote.centers = None
    assert_same_results(got, want)
    assert want.returns.std() > 0
    vector_bytes = 4 * parts.decoder.num_params * len(vectors)
    assert 2 * vector_bytes <= got.stats.shared_bytes
    if name in ("pgpe", "snes", "cem", "sep_cma_es"):
        assert len(vectors) == 2  # compact genomes: one centre and one scale vector


def test_wire_bytes_are_seed_chains_not_weights():
    ga = wire_bytes(ga_genomes(1000), 1, chunks=50)
    es = wire_bytes(
        [ESGenome(0, k, 1, 0.1) for k in range(1000)], 1, chunks=50, nodes=4, num_params=1000
    )
    # A GA genome of one mutation: 8 (init) + 8 (length) + 16 (mutation) bytes packed.
    assert 32_000 <= ga["sent"] < 32_000 + 50 * 1500
    assert es["shared"] == 4 * 4 * 1000


ALGORITHM_OVERRIDES = {
    "ga": [
        "algorithm.name=ga",
        "algorithm.ga.population_size=8",
        "algorithm.ga.truncation=3",
        "algorithm.ga.validation_candidates=2",
        "algorithm.ga.validation_episodes=2",
    ],
    "pgpe": ["algorithm.name=pgpe", "algorithm.pgpe.population_size=8"],
}


@pytest.mark.parametrize("algorithm", ["ga", pytest.param("pgpe", marks=pytest.mark.slow)])
def test_training_on_ray_equals_training_locally(cluster, remote, tmp_path, algorithm) -> None:
    """``evaluator.backend: ray`` changes where episodes run, not what a run computes: two
    generations (GA: population + validation phases; PGPE: samples with a registered scale
    vector + centre phase; observation statistics) log the same metrics, also when the Ray
    run is stopped after one generation and resumed."""
    import csv

    remote.close()  # its actors hold every CPU of the cluster; no later test uses it

    from neuroevo.run.plan import plan
    from neuroevo.run.trainer import open_run

    overrides = [
        *CARTPOLE,
        "model.obs_stats_fraction=0.5",
        *ALGORITHM_OVERRIDES[algorithm],
        "noise.size=65536",
        f"noise.cache_dir={tmp_path / 'noise'}",
        "evaluator.slots_per_worker=4",
        "evaluator.workers=1",
        "logging.tensorboard=false",
        "logging.progress=false",
    ]

    def train(name: str, backend: str, generations: int, resume: bool = False) -> None:
        cfg = load_config(
            None,
            [*overrides, f"evaluator.backend={backend}", f"budget.generations={generations}"],
        )
        trainer = open_run(plan(cfg, tmp_path / name, resume=resume), quiet=True)
        try:
            trainer.train()
        finally:
            trainer.close()

    def metrics(name: str) -> list[dict[str, str]]:
        with open(tmp_path / name / "metrics.csv") as f:
            return [
                {k: v for k, v in row.items() if "time" not in k and "per_s" not in k}
                for row in csv.DictReader(f)
            ]

    train("local", "local", 2)
    train("ray", "ray", 2)
    train("ray-resumed", "ray", 1)  # stopped after one generation, then resumed on Ray
    train("ray-resumed", "ray", 2, resume=True)
    assert len(metrics("local")) == 2
    assert metrics("ray") == metrics("local")
    assert metrics("ray-resumed") == metrics("local")


def test_a_bad_backend_or_ray_section_names_the_key() -> None:
    from neuroevo.config.schema import ConfigError, load_config

    base = ["budget.generations=1"]
    with pytest.raises(ConfigError, match=r"evaluator\.backend: 'rey' is not one of"):
        load_config(None, [*base, "evaluator.backend=rey"])
    with pytest.raises(ConfigError, match=r"evaluator\.ray\.workers_per_node: 0 must be in \[1, "):
        load_config(None, [*base, "evaluator.ray.workers_per_node=0"])


def test_train_with_an_unreachable_cluster_exits_2_and_creates_nothing(tmp_path, capsys) -> None:
    from neuroevo.cli.train import main

    run_dir = tmp_path / "run"
    code = main(
        [
            "--set",
            "budget.generations=1",
            "--set",
            "env.kind=gym",
            "--set",
            "env.id=CartPole-v1",
            "--set",
            "model.name=mlp",
            "--set",
            "model.mlp.hidden_sizes=[8]",
            "--set",
            "noise.size=65536",
            "--set",
            f"noise.cache_dir={tmp_path / 'noise'}",
            "--set",
            "evaluator.backend=ray",
            "--set",
            "evaluator.ray.address=127.0.0.1:1",  # nothing listens on port 1
            "--run-dir",
            str(run_dir),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "cannot reach the Ray cluster at '127.0.0.1:1'" in err[0]
    assert not run_dir.exists()
