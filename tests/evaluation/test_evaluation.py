"""The pipelined evaluator against a pure-TF toy env and linear model (tests/toy_env.py), and
an integration check with the Atari env and ``nature_small`` when those are built."""

from __future__ import annotations

import itertools
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from toy_env import ChainEnv, LinearModel, decode, reference_episode

from neuroevo.evaluation import (
    TIME_KINDS,
    BaseEvaluator,
    EvalProgress,
    EvalRequest,
    EvaluationError,
    Evaluator,
    Phase,
    default_workers,
    inter_op_threads,
    split_slots,
)
from neuroevo.evaluation import worker as worker_module
from neuroevo.evaluation.obs_norm import RunningObsStats
from neuroevo.evaluation.results import (
    EPISODE_FIELDS,
    PER_EPISODE,
    EpisodeTable,
    _covered,
    _union,
)

SLOTS = 8
# More workers than TensorFlow's inter-op threads (2 on a 2-core machine) is slower, not wrong.
many_workers = pytest.mark.filterwarnings("ignore:.*inter-op threads")


@pytest.fixture(scope="module")
def toy():
    """One env and model shared by the tests (evaluators reset every slot they use)."""
    return ChainEnv(SLOTS), LinearModel(SLOTS)


def make_seeds(genomes: int, episodes: int) -> np.ndarray:
    return (np.arange(genomes * episodes, dtype=np.int64) * 7 + 1).reshape(genomes, episodes)


def no_worker_threads() -> bool:
    return not any(t.name.startswith("neuroevo-eval") for t in threading.enumerate())


@many_workers
@pytest.mark.parametrize(("workers", "max_steps"), [(1, 9), (4, 9), (3, None)])
def test_results_match_reference_whatever_the_worker_count(toy, workers, max_steps):
    env, model = toy
    genomes, episodes = list(range(100, 111)), 3
    seeds = make_seeds(len(genomes), episodes)
    with Evaluator(env, model, decode, workers=workers) as evaluator:
        results = evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=max_steps)
    ref = [
        [reference_episode(g, int(s), max_steps) for s in row]
        for g, row in zip(genomes, seeds, strict=True)
    ]
    for key, got in [
        ("return", results.returns),
        ("sign_return", results.sign_returns),
        ("length", results.lengths),
        ("frames", results.frames),
        ("terminated", results.terminated),
        ("truncated", results.truncated),
        ("behavior", results.behavior),
        ("flags", results.flags),
    ]:
        np.testing.assert_array_equal(got, [[e[key] for e in row] for row in ref], err_msg=key)
    stats = results.stats
    assert len(stats.workers) == workers
    assert stats.frames == results.total_frames
    assert stats.steps == results.total_steps
    assert stats.episodes == results.num_episodes == len(genomes) * episodes
    for worker in stats.workers:
        assert set(worker.seconds) == set(TIME_KINDS)
        assert sum(worker.seconds.values()) == pytest.approx(stats.wall_s, rel=1e-6)
    assert no_worker_threads()


@many_workers
def test_results_do_not_depend_on_worker_count(toy):
    env, model = toy
    genomes, seeds = list(range(20, 37)), make_seeds(17, 2)
    results = []
    for workers in (1, 4):
        with Evaluator(env, model, decode, workers=workers) as evaluator:
            results.append(evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=11))
    one, four = results
    names = ("returns", "sign_returns", "lengths", "frames", "terminated", "truncated")
    for name in (*names, "behavior", "flags"):
        np.testing.assert_array_equal(getattr(one, name), getattr(four, name), err_msg=name)


@many_workers
@pytest.mark.parametrize("workers", [1, 3])
def test_sampled_observation_stats_match_reference(toy, workers):
    """The moments of exactly the observations the networks acted on in the sampled episodes,
    merged in the same order whatever the worker count (so bit-identical across K)."""
    env, model = toy
    rng = np.random.default_rng(workers)
    genomes, episodes = rng.integers(0, 10_000, 13).tolist(), 3
    seeds = rng.integers(0, 1_000, (13, episodes))
    sample = rng.random((13, episodes)) < 0.4
    with Evaluator(env, model, decode, workers=workers) as evaluator:
        results = evaluator.evaluate(EvalRequest(genomes, seeds, sample_obs=sample), max_steps=7)
        unsampled = evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=7)
    observed = [
        reference_episode(genomes[i], int(seeds[i, j]), 7)["observations"]
        for i, j in zip(*np.nonzero(sample), strict=True)
    ]
    reference = RunningObsStats((4,))
    reference.update(np.concatenate(observed))
    stats = results.obs_stats
    assert stats.count == reference.count == sum(len(o) for o in observed)
    np.testing.assert_allclose(stats.state_dict()["mean"], reference.state_dict()["mean"], 1e-12)
    np.testing.assert_allclose(stats.state_dict()["m2"], reference.state_dict()["m2"], 1e-10)
    np.testing.assert_array_equal(results.returns, unsampled.returns)
    assert unsampled.obs_stats is None
    one = Evaluator(env, model, decode, workers=1)
    with one:
        again = one.evaluate(EvalRequest(genomes, seeds, sample_obs=sample), max_steps=7).obs_stats
    for key, value in stats.state_dict().items():
        np.testing.assert_array_equal(value, again.state_dict()[key], err_msg=key)


def test_sample_obs_must_match_the_episode_table(toy):
    env, model = toy
    with Evaluator(env, model, decode, workers=1) as evaluator:
        with pytest.raises(ValueError, match="sample_obs must be bool of shape"):
            evaluator.evaluate(
                EvalRequest([1, 2], make_seeds(2, 1), sample_obs=np.ones((2, 2), bool))
            )
        results = evaluator.evaluate(
            EvalRequest([1, 2], make_seeds(2, 1), sample_obs=np.zeros((2, 1), bool))
        )
    assert results.obs_stats is None


@many_workers
def test_each_genome_is_decoded_once(toy, monkeypatch):
    """Several episodes per genome, spread over workers and refill chunks of two slots."""
    monkeypatch.setattr(worker_module, "REFILL_BYTES", 2 * 4 * toy[1].num_params)
    env, model = toy
    calls: list[list[int]] = []

    def counting_decode(genomes):
        calls.append(list(genomes))
        return decode(genomes)

    genomes, seeds = list(range(9)), make_seeds(9, 5)
    with Evaluator(env, model, counting_decode, workers=4) as evaluator:
        results = evaluator.evaluate(EvalRequest(genomes, seeds), max_steps=6)
    assert sorted(g for batch in calls for g in batch) == genomes
    assert max(len(batch) for batch in calls) <= 2
    expected = [[reference_episode(g, int(s), 6)["return"] for s in seeds[g]] for g in genomes]
    np.testing.assert_array_equal(results.returns, expected)


def test_empty_population(toy):
    env, model = toy
    with Evaluator(env, model, decode, workers=2) as evaluator:
        results = evaluator.evaluate(EvalRequest([], np.zeros((0, 2), np.int64)))
    assert results.returns.shape == (0, 2)
    assert results.total_frames == 0


def test_worker_error_surfaces_with_traceback_and_evaluator_recovers(toy):
    env, model = toy

    def failing_decode(genomes):
        if 6 in genomes:
            raise KeyError("bad genome 6")
        return decode(genomes)

    with Evaluator(env, model, failing_decode, workers=2) as evaluator:
        with pytest.raises(EvaluationError, match="failing_decode") as info:
            evaluator.evaluate(EvalRequest(list(range(10)), make_seeds(10, 1)))
        assert isinstance(info.value.__cause__, KeyError)
        assert "bad genome 6" in str(info.value)
        assert no_worker_threads()
        results = evaluator.evaluate(EvalRequest(list(range(6)), make_seeds(6, 1)))
    assert results.num_episodes == 6


def test_env_op_error_surfaces(toy):
    env = ChainEnv(4, poison_seed=15)
    with (
        Evaluator(env, LinearModel(4), decode, workers=2) as evaluator,
        pytest.raises(EvaluationError, match="poisoned seed") as info,
    ):
        evaluator.evaluate(EvalRequest(list(range(6)), make_seeds(6, 1)))  # seeds 1, 8, 15, ...
    assert isinstance(info.value.__cause__, tf.errors.InvalidArgumentError)
    assert no_worker_threads()


def test_ctrl_c_stops_all_workers_quickly(ctrl_c):
    """Stops, not finishes: the bound is a tenth of the uninterrupted work (sleeps, so load
    barely stretches it) and far above the normal stop time (well under a second)."""
    episodes = 4000
    env = ChainEnv(4, step_delay_s=0.01)  # about 400 s of work if not interrupted
    with Evaluator(env, LinearModel(4), decode, workers=2) as evaluator:
        timer = threading.Timer(0.5, ctrl_c)
        start = time.monotonic()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            evaluator.evaluate(EvalRequest(list(range(episodes)), make_seeds(episodes, 1)))
        timer.join()
    assert time.monotonic() - start < 40.0
    assert no_worker_threads()


def test_progress_reports_are_live_and_consistent(toy):
    env, model = toy
    reports: list[EvalProgress] = []
    with Evaluator(env, model, decode, workers=2) as evaluator:
        results = evaluator.evaluate(
            EvalRequest(list(range(12)), make_seeds(12, 2)),
            progress=reports.append,
            progress_interval_s=0,
        )
    assert len(reports) >= 2
    assert all(a.steps <= b.steps and a.frames <= b.frames for a, b in itertools.pairwise(reports))
    final = reports[-1]
    assert final.episodes_done == final.episodes_total == 24
    assert final.frames == results.total_frames and final.steps == results.total_steps
    for shares in final.shares:
        assert sum(shares.values()) == pytest.approx(1.0)


def test_simulated_latency_overlaps_other_workers_env_steps():
    """Structure, not speed: with two workers, one's forward (and its simulated accelerator
    latency) runs while the other steps its envs; with one worker nothing can overlap."""
    env, model = ChainEnv(4, step_delay_s=0.005), LinearModel(4)
    genomes, seeds = list(range(8)), make_seeds(8, 1)
    runs = {}
    for workers in (1, 2):
        with Evaluator(env, model, decode, workers=workers, simulated_latency_s=0.005) as ev:
            runs[workers] = ev.evaluate(EvalRequest(genomes, seeds), max_steps=12)
    np.testing.assert_array_equal(runs[1].returns, runs[2].returns)
    assert runs[1].stats.overlap_s("net", "env") == 0.0
    assert runs[2].stats.overlap_s("net", "env") > 0.0
    for worker in runs[2].stats.workers:
        env_iv, net_iv = worker.intervals["env"], worker.intervals["net"]
        assert len(env_iv) == worker.calls
        both = np.concatenate([env_iv, net_iv])
        both = both[np.argsort(both[:, 0])]
        assert np.all(both[1:, 0] >= both[:-1, 1] - 1e-6)  # one worker never overlaps itself
        # the latency follows every call whose slots go on (all but at most one per episode)
        assert worker.seconds["net"] >= 0.005 * (worker.calls - worker.episodes)


def test_bad_arguments(toy):
    env, model = toy
    with pytest.raises(ValueError, match="slots"):
        Evaluator(env, LinearModel(SLOTS + 1), decode)
    with pytest.raises(ValueError, match="workers"):
        Evaluator(env, model, decode, workers=SLOTS + 1)
    evaluator = Evaluator(env, model, decode, workers=1)
    with pytest.raises(ValueError, match="episode_seeds"):
        evaluator.evaluate(EvalRequest([1, 2], np.zeros((3, 2), np.int64)))
    with pytest.raises(ValueError, match="max_steps"):
        evaluator.evaluate(EvalRequest([1], np.zeros((1, 1), np.int64)), max_steps=0)
    evaluator.close()
    with pytest.raises(RuntimeError, match="closed"):
        evaluator.evaluate(EvalRequest([1], np.zeros((1, 1), np.int64)))


def test_wrong_decode_shape_is_reported(toy):
    env, model = toy
    with (
        Evaluator(env, model, lambda g: np.zeros((len(g), 3)), workers=1) as evaluator,
        pytest.raises(EvaluationError, match="decode returned shape"),
    ):
        evaluator.evaluate(EvalRequest([1], np.zeros((1, 1), np.int64)))


def test_slot_split_and_default_workers():
    assert split_slots(10, 3) == ((0, 3), (3, 7), (7, 10))
    assert split_slots(4, 4) == ((0, 1), (1, 2), (2, 3), (3, 4))
    assert default_workers(1, "/CPU:0") == 1
    assert default_workers(64, "/CPU:0") == min(2, inter_op_threads())
    assert default_workers(64, "/GPU:0") == min(3, inter_op_threads())


def test_interval_overlap_helpers():
    union = _union(np.array([[3.0, 4.0], [0.0, 1.0], [0.5, 2.0], [5.0, 6.0]]))
    np.testing.assert_array_equal(union, [[0.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert _covered(np.array([[1.0, 3.5], [5.5, 7.0]]), union) == pytest.approx(2.0)
    assert _covered(np.array([[2.0, 3.0]]), union) == 0.0


def test_atari_nature_small_independent_of_workers():
    """Integration: the real C++ Atari env and nature_small give identical results with 1 and
    2 workers."""
    from neuroevo.envs.atari import AtariEnv
    from neuroevo.models import make_model

    slots = 4
    env = AtariEnv("pong", num_slots=slots)
    model = make_model("nature_small", slots, env.observation_spec, env.action_spec)
    rng = np.random.default_rng(0)
    scales = model.init_scales()

    def atari_decode(genomes):
        return np.stack(
            [scales * np.random.default_rng(g).standard_normal(scales.size) for g in genomes]
        ).astype(np.float32)

    seeds = rng.integers(0, 2**31, (5, 1))
    results = []
    for workers in (1, 2):
        with Evaluator(env, model, atari_decode, workers=workers) as evaluator:
            results.append(evaluator.evaluate(EvalRequest(list(range(5)), seeds), max_steps=60))
    np.testing.assert_array_equal(results[0].returns, results[1].returns)
    np.testing.assert_array_equal(results[0].lengths, results[1].lengths)
    np.testing.assert_array_equal(results[0].frames, results[1].frames)
    assert results[0].total_frames >= 4 * results[0].total_steps
    env.close()


def test_mujoco_nan_policies_are_flagged_and_do_not_poison_others():
    """Integration: genomes whose weights are NaN act NaN; the MuJoCo op ends only their
    episodes, results flag them ``NAN_ACTION``, and the observation statistics skip nothing
    but what those policies never saw."""
    from neuroevo.envs.mujoco import NAN_ACTION, MujocoEnv
    from neuroevo.models import make_model

    slots = 4
    env = MujocoEnv("Hopper", num_slots=slots)
    model = make_model("mlp", slots, env.observation_spec, env.action_spec, hidden_sizes=(8,))
    scales = model.init_scales()

    def mujoco_decode(genomes):
        rows = [scales * np.random.default_rng(g).standard_normal(scales.size) for g in genomes]
        rows = np.stack(rows).astype(np.float32)
        rows[np.array(genomes) % 3 == 0] = np.nan
        return rows

    genomes = list(range(1, 8))
    seeds = np.arange(7, dtype=np.int64).reshape(7, 1)
    with Evaluator(env, model, mujoco_decode, workers=2) as evaluator:
        results = evaluator.evaluate(
            EvalRequest(genomes, seeds, sample_obs=np.ones((7, 1), bool)), max_steps=50
        )
    poisoned = np.array(genomes) % 3 == 0
    assert results.flags[poisoned, 0].tolist() == [NAN_ACTION] * poisoned.sum()
    assert results.flags[~poisoned, 0].tolist() == [0] * (~poisoned).sum()
    assert results.flagged_episodes == poisoned.sum()
    assert (results.lengths[poisoned] == 1).all() and (results.lengths[~poisoned] > 1).all()
    assert np.isfinite(results.returns).all()
    assert results.obs_stats.count == results.lengths.sum()
    assert np.isfinite(results.obs_stats.mean).all() and np.isfinite(results.obs_stats.std).all()
    env.close()


def random_episode_values(rng: np.random.Generator, m: int) -> dict[str, np.ndarray]:
    """Random values of every per-episode field (optional ones included) for ``m`` cells."""
    values = {}
    for name, field in EPISODE_FIELDS.items():
        dtype = np.dtype(field.metadata[PER_EPISODE] or np.uint8)
        shape = (m, 3) if field.metadata[PER_EPISODE] is None else (m,)
        if dtype.kind == "b":
            values[name] = rng.random(shape) < 0.5
        elif dtype.kind == "f":
            values[name] = rng.normal(size=shape).astype(dtype)
        else:
            values[name] = rng.integers(0, 100, size=shape).astype(dtype)
    return values


@pytest.mark.parametrize("sampled_share", [0.0, 0.5])
def test_chunk_tables_merge_into_the_table_one_evaluation_fills(sampled_share, rng):
    """The Ray driver's path: chunks of flat cells, each a pickled ``[m, 1]`` table with
    chunk-relative observation moments, merged in any order, equal the table the workers
    would have filled directly, for every per-episode field; with no observations sampled
    and with some (at least one)."""
    genomes, episodes, obs_shape = int(rng.integers(2, 7)), int(rng.integers(1, 4)), (2, 2)
    cells = genomes * episodes
    values = random_episode_values(rng, cells)
    sampled = np.flatnonzero(rng.random(cells) < sampled_share)
    if sampled_share > 0 and sampled.size == 0:
        sampled = rng.integers(0, cells, size=1)
    moments = {
        int(c): (int(rng.integers(1, 50)), rng.normal(size=4), rng.random(4)) for c in sampled
    }
    whole = EpisodeTable(genomes, episodes, obs_shape=obs_shape)
    whole.record(*np.divmod(np.arange(cells), episodes), **values)
    for cell, m in moments.items():
        whole.record_obs_moments(cell, *m)
    want = whole.to_results(stats=None)

    bounds = np.unique(np.r_[0, rng.integers(0, cells, size=3), cells])
    merged = EpisodeTable(genomes, episodes)
    for start, stop in rng.permutation(list(itertools.pairwise(bounds.tolist()))):
        part = EpisodeTable(stop - start, 1, obs_shape=obs_shape)
        rows = np.arange(stop - start)
        part.record(rows, np.zeros_like(rows), **{k: v[start:stop] for k, v in values.items()})
        for cell in range(start, stop):
            if cell in moments:
                part.record_obs_moments(cell - start, *moments[cell])
        merged.merge(pickle.loads(pickle.dumps(part)), int(start))
    got = merged.to_results(stats=None)

    for name in EPISODE_FIELDS:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
        assert getattr(got, name).dtype == getattr(want, name).dtype, name
    assert [m[0] for m in got.obs_moments or ()] == sorted(moments)
    assert bool(moments) == (sampled_share > 0)
    if moments:
        np.testing.assert_array_equal(
            got.obs_stats.state_dict()["m2"], want.obs_stats.state_dict()["m2"]
        )
        assert got.obs_stats.count == sum(m[0] for m in moments.values())
    else:
        assert got.obs_stats is None and want.obs_stats is None
    rebuilt = EpisodeTable.from_results(got).to_results(stats=None)
    for name in EPISODE_FIELDS:
        np.testing.assert_array_equal(getattr(rebuilt, name), getattr(got, name), err_msg=name)
    assert [m[0] for m in rebuilt.obs_moments or ()] == [m[0] for m in got.obs_moments or ()]


def test_episode_table_rejects_an_unknown_field():
    table = EpisodeTable(2, 2)
    with pytest.raises(KeyError, match="'return' is not a per-episode field"):
        table.record(np.array([0]), np.array([0]), **{"return": np.ones(1)})


def test_evaluators_share_one_evaluate_contract():
    """One signature and one argument check (``BaseEvaluator.evaluate``), in every backend."""
    from neuroevo.evaluation.ray import RayEvaluator

    for backend in (Evaluator, RayEvaluator):
        assert issubclass(backend, BaseEvaluator)
        assert backend.evaluate is BaseEvaluator.evaluate


def test_request_is_checked_when_built_and_read_only():
    seeds = make_seeds(2, 3).astype(np.int32)
    request = EvalRequest([4, 5], seeds, phase="validation", generation=2)
    assert request.phase is Phase.VALIDATION and request.episodes_per_genome == 3
    assert request.episode_seeds.dtype == np.int64 and not request.episode_seeds.flags.writeable
    assert seeds.flags.writeable  # the caller's array is left alone
    bits = EvalRequest([1], np.array([[2**64 - 1]], np.uint64)).episode_seeds
    assert bits.tolist() == [[-1]]  # a seed is a bit pattern: kept, never wrapped by a cast
    cases = [
        ({"episode_seeds": make_seeds(2, 2).astype(float)}, "episode_seeds must be integers"),
        ({"episode_seeds": np.zeros((2, 0), np.int64)}, "episodes_per_genome >= 1"),
        ({"episode_seeds": make_seeds(3, 1)}, r"shape \(2, episodes_per_genome"),
        ({"phase": "warmup"}, "phase must be one of population"),
        ({"generation": -1}, "generation must be an int >= 0"),
        ({"action_noise_std": float("nan")}, "action_noise_std must be a finite number"),
        ({"sample_obs": np.ones((2, 2), np.int64)}, "sample_obs must be bool of shape"),
    ]
    for changes, message in cases:
        fields = {"genomes": [4, 5], "episode_seeds": make_seeds(2, 2), **changes}
        with pytest.raises(ValueError, match=message):
            EvalRequest(**fields)


def test_importing_the_request_type_imports_no_tensorflow():
    code = (
        "import sys; import neuroevo.algorithms; from neuroevo.evaluation import EvalRequest; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        env=os.environ | {"PYTHONPATH": str(Path(__file__).parents[2])},
    )
