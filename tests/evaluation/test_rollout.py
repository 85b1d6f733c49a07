"""The in-graph rollout (``evaluation.rollout``) against the per-step path: identical
per-episode results for GA, ES and NS-ES genomes on the three op envs (and ES genomes with a
per-parameter scale vector, as PGPE, SNES, CEM and sep-CMA-ES make them), whatever the number of
workers or the chunk length, and the path choice by env capability."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from neuroevo.envs import make_env
from neuroevo.evaluation import EvalRequest, EvaluationError, Evaluator
from neuroevo.evaluation import rollout as rollout_module
from neuroevo.evaluation.behavior_params import BehaviorParams
from neuroevo.genomes.genome import ESGenome, GAGenome, GenomeDecoder
from neuroevo.genomes.noise import NoiseTable
from neuroevo.models import make_model

FIELDS = ("returns", "sign_returns", "lengths", "frames", "terminated", "truncated")
OPTIONAL = ("behavior", "flags")


def _assert_same(reference, results, what):
    for name in FIELDS + OPTIONAL:
        a, b = getattr(reference, name), getattr(results, name)
        if a is None:
            assert b is None, (what, name)
        else:
            assert np.array_equal(a, b), (what, name, a, b)
    if reference.obs_moments is None:
        assert results.obs_moments is None, what
        return
    assert [m[:2] for m in reference.obs_moments] == [m[:2] for m in results.obs_moments], what
    for (_, _, mean_a, m2_a), (_, _, mean_b, m2_b) in zip(
        reference.obs_moments, results.obs_moments, strict=True
    ):
        assert np.array_equal(mean_a, mean_b) and np.array_equal(m2_a, m2_b), what
    assert np.array_equal(reference.obs_stats.mean, results.obs_stats.mean), what


def _genomes(kind, rng, size):
    def index():
        return int(rng.integers(size))

    if kind == "ga":  # initial genomes (random search) and children of two parents
        parents = [GAGenome(index()), GAGenome(index()).child(index(), 0.05)]
        return [GAGenome(index()), GAGenome(index())] + [
            parents[i % 2].child(index(), 0.02) for i in range(4)
        ]
    if kind == "scaled":  # centre 1, scale vector 3
        return [ESGenome(1, index(), s, 1.0, scale_id=3) for s in (1, -1, 0)]
    centres = [1] if kind == "es" else [1, 2]  # NS-ES: one centre per meta-population member
    return [ESGenome(c, index(), s, 0.05) for c in centres for s in (1, -1)] + [
        ESGenome(centres[-1], 0, 0, 0.05)
    ]


def _setup(env_kind, slots):
    if env_kind == "maze":
        env = make_env("maze", "medium", slots, max_episode_steps=40)
        model = make_model("mlp", slots, env.observation_spec, env.action_spec, hidden_sizes=(8,))
    elif env_kind == "mujoco":
        env = make_env("mujoco", "Hopper", slots, max_episode_steps=60)
        model = make_model("mlp", slots, env.observation_spec, env.action_spec, hidden_sizes=(8,))
    else:
        env = make_env("atari", "frostbite", slots)
        model = make_model("nature_small", slots, env.observation_spec, env.action_spec)
    return env, model


CASES = [
    ("maze", "ga"),
    ("maze", "es"),
    ("maze", "nses"),
    ("mujoco", "ga"),
    ("mujoco", "es"),
    ("mujoco", "nses"),
    ("mujoco", "scaled"),
    ("atari", "ga"),
    ("atari", "es"),
    ("atari", "nses"),
]


@pytest.mark.parametrize(("env_kind", "genome_kind"), CASES)
def test_graph_rollout_equals_the_per_step_path(env_kind, genome_kind, rng):
    seed = int(rng.integers(1 << 31))  # the rng fixture prints its own seed for a replay
    slots = 4
    env, model = _setup(env_kind, slots)
    size = 20_000
    noise = NoiseTable(seed % 1000, size=model.num_params + size, cache_dir=False)
    decoder = GenomeDecoder(noise, model.init_scales())
    for centre in (1, 2):
        decoder.set_center(centre, (0.1 * rng.normal(size=model.num_params)).astype(np.float32))
    std = rng.uniform(0.01, 0.1, model.num_params).astype(np.float32)
    decoder.set_center(3, std, keep=3)
    genomes = _genomes(genome_kind, rng, size)
    episodes = 2
    seeds = rng.integers(0, 2**62, (len(genomes), episodes))
    max_steps = 30 if env_kind == "atari" else 50
    options = {}
    behavior = None
    if genome_kind == "nses" and env_kind != "atari":
        behavior = BehaviorParams(kind="trajectory", every=7, samples=4)
    if env_kind != "atari":
        options["sample_obs"] = rng.random((len(genomes), episodes)) < 0.7
    if env_kind == "mujoco":  # with and without action noise (the loop leaves it out at 0)
        options["action_noise_std"] = 0.0 if genome_kind == "ga" else 0.05
    request = EvalRequest(genomes, seeds, **options)
    # Its queue fits in the slots: the loop calls the refill instead of inlining it.
    fitting = EvalRequest(
        genomes[:2], seeds[:2], **{k: v[:2] if k == "sample_obs" else v for k, v in options.items()}
    )
    assert fitting.episode_seeds.size <= slots < request.episode_seeds.size
    runs, fitting_runs = {}, {}
    for rollout, workers, chunk in [("step", 2, 1), ("graph", 1, 64), ("graph", 2, 3)]:
        with Evaluator(
            env,
            model,
            decoder.decode_batch,
            workers=workers,
            rollout=rollout,
            chunk_steps=chunk,
            behavior=behavior,
        ) as evaluator:
            runs[rollout, workers, chunk] = evaluator.evaluate(request, max_steps=max_steps)
            if workers == 2:
                fitting_runs[rollout] = evaluator.evaluate(fitting, max_steps=max_steps)
            if rollout == "graph" and workers == 2:  # again on the same evaluator: no leftovers
                runs["again"] = evaluator.evaluate(request, max_steps=max_steps)
    reference = runs.pop(("step", 2, 1))
    assert reference.total_steps > 2 * len(genomes)
    for what, results in runs.items():
        _assert_same(reference, results, what)
    _assert_same(fitting_runs["step"], fitting_runs["graph"], "queue within the slots")
    graph = runs["graph", 1, 64].stats
    assert graph.python_calls_per_step < 0.1 < reference.stats.python_calls_per_step
    env.close()


@pytest.mark.parametrize("rollout", ["graph", "step"])
def test_a_queue_shorter_than_the_slots_is_shared_between_the_workers(rollout, rng):
    """5 episodes on two workers of 4 slots: each worker runs at most 3 at once (its share,
    rounded up), not 4 and 1 as when the first to claim took all it could; the results are
    those of one worker."""
    seed = int(rng.integers(1 << 31))  # the rng fixture prints its own seed for a replay
    steps = 200
    env = make_env("maze", "medium", 8, max_episode_steps=steps)
    model = make_model("mlp", 8, env.observation_spec, env.action_spec, hidden_sizes=(8,))
    noise = NoiseTable(seed % 1000, size=model.num_params + 20_000, cache_dir=False)
    decoder = GenomeDecoder(noise, model.init_scales())
    genomes = [GAGenome(int(rng.integers(20_000))) for _ in range(5)]
    request = EvalRequest(genomes, rng.integers(0, 2**62, (5, 1)))
    runs = {}
    for workers in (1, 2):
        with Evaluator(
            env, model, decoder.decode_batch, workers=workers, rollout=rollout
        ) as evaluator:
            runs[workers] = evaluator.evaluate(request, max_steps=steps)
    _assert_same(runs[1], runs[2], "two workers")
    assert (runs[2].lengths == steps).all()  # the maze never ends an episode early
    first, second = sorted(runs[2].stats.workers, key=lambda w: w.intervals["net"][0, 0])
    # Only a worker that claims nothing before the first one refills its slots at the end of
    # its episodes finds the queue empty (it lost the race to start, not the share): 5 / 0 is
    # right only then. A worker claims just before its first forward; the first one's end
    # refill starts after its forward before the last step (per-step path) or in its loop
    # iteration steps - 1, after that step (graph path, one refill interval per iteration).
    ends = (
        first.intervals["load"][steps - 1, 0]
        if rollout == "graph"
        else first.intervals["net"][steps - 2, 0]
    )
    second_in_time = second.intervals["net"].size and second.intervals["net"][0, 0] < ends
    expected = [[2, 3]] if second_in_time else [[2, 3], [0, 5]]
    assert sorted([first.episodes, second.episodes]) in expected
    env.close()


@pytest.mark.parametrize("env_kind", ["maze", "mujoco"])
def test_gather_models_materialize_with_tensorflow_ops(env_kind, rng):
    """A model that gathers its weights (as on a GPU, here on the CPU) gets the gather
    materializer; GA and scale-vector ES genomes score as on the per-step path."""
    seed = int(rng.integers(1 << 31))  # the rng fixture prints its own seed for a replay
    env, _ = _setup(env_kind, 3)
    model = make_model(
        "mlp", 3, env.observation_spec, env.action_spec, hidden_sizes=(8,), implementation="gather"
    )
    noise = NoiseTable(seed % 1000, size=model.num_params + 20_000, cache_dir=False)
    decoder = GenomeDecoder(noise, model.init_scales())
    decoder.set_center(1, (0.1 * rng.normal(size=model.num_params)).astype(np.float32))
    decoder.set_center(3, rng.uniform(0.01, 0.1, model.num_params).astype(np.float32))
    genomes = _genomes("ga", rng, 20_000) + _genomes("scaled", rng, 20_000)
    request = EvalRequest(genomes, rng.integers(0, 2**62, (len(genomes), 2)))
    runs = {}
    for rollout in ("step", "graph"):
        with Evaluator(env, model, decoder.decode_batch, workers=2, rollout=rollout) as evaluator:
            runs[rollout] = evaluator.evaluate(request, max_steps=40)
            if rollout == "graph":
                assert evaluator._traced.graph.materializer.implementation == "gather"
    _assert_same(runs["step"], runs["graph"], "gather model")
    env.close()


def test_plain_decode_function_and_path_choice():
    """A decode callable that is no GenomeDecoder: genomes host-decoded once, still in the
    graph; a gymnasium env keeps the per-step path and refuses rollout='graph'."""
    rng = np.random.default_rng(7)
    env, model = _setup("maze", 3)
    weights = (0.3 * rng.normal(size=(5, model.num_params))).astype(np.float32)

    def decode(genomes):
        return weights[list(genomes)]

    seeds = rng.integers(0, 2**31, (5, 2))
    results = {}
    for rollout in ("step", "graph"):
        with Evaluator(env, model, decode, rollout=rollout, workers=2) as evaluator:
            assert evaluator.rollout == rollout
            results[rollout] = evaluator.evaluate(EvalRequest(list(range(5)), seeds), max_steps=30)
    _assert_same(results["step"], results["graph"], "plain decode")
    with Evaluator(env, model, decode) as evaluator:
        assert evaluator.rollout == "graph"
    with pytest.raises(ValueError, match="chunk_steps"):
        Evaluator(env, model, decode, chunk_steps=0)

    gym_env = make_env("gym", "CartPole-v1", num_slots=2, max_episode_steps=5, threads=1)
    gym_model = make_model("mlp", 2, gym_env.observation_spec, gym_env.action_spec, hidden_sizes=[])
    with Evaluator(gym_env, gym_model, decode) as evaluator:
        assert evaluator.rollout == "step"
    with pytest.raises(ValueError, match="graph_rollout"):
        Evaluator(gym_env, gym_model, decode, rollout="graph")


PLACEMENT_SCRIPT = textwrap.dedent(
    """
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from neuroevo.envs import make_env
    from neuroevo.evaluation import EvalRequest, Evaluator
    from neuroevo.genomes.genome import GAGenome, GenomeDecoder
    from neuroevo.models import make_model
    from neuroevo.genomes.noise import NoiseTable

    env = make_env("maze", "medium", 2, max_episode_steps=20)
    results = []
    for device in ("/CPU:1", "/CPU:0"):
        model = make_model("mlp", 2, env.observation_spec, env.action_spec, hidden_sizes=(4,),
                           device=device)
        decoder = GenomeDecoder(NoiseTable(0, size=5000, cache_dir=False), model.init_scales())
        genomes = [GAGenome(i).child(100 + i, 0.1) for i in range(3)]
        with Evaluator(env, model, decoder.decode_batch, workers=2) as evaluator:
            request = EvalRequest(genomes, np.arange(3).reshape(3, 1))
            results.append(evaluator.evaluate(request))
            # 3 items on 2 slots: the refill inlined; 2 items: called as a function.
            results.append(evaluator.evaluate(EvalRequest(genomes[:2], [[0], [1]])))
            graphs = [evaluator._traced.graph.function(False, False, n).graph for n in (3, 2)]
        noinline = []
        def find_noinline(g):
            for f in g._functions.values():
                noinline.extend([f.name] if "_noinline" in f.cached_definition.attr else [])
                find_noinline(f.graph)
        for graph in graphs:
            noinline.clear()
            find_noinline(graph)
            assert bool(noinline) == (graph is graphs[1]), noinline
        if device == "/CPU:1":
            for graph in graphs:
                devices = {}
                def walk(g):
                    for op in g.get_operations():
                        devices.setdefault(op.type, set()).add(op.device)
                    for f in g._functions.values():
                        walk(f.graph)
                walk(graph)
                print(devices)
                assert any(d.endswith("CPU:1") for d in devices["NeuroevoMaterialize"])
                for op in ("NeuroevoMazeStep", "NeuroevoEpisodeAdvance", "NeuroevoEpisodeStart",
                           "NeuroevoMazeReset"):
                    assert all(d.endswith("CPU:0") for d in devices[op]), op
    assert np.array_equal(results[0].returns, results[2].returns)
    assert np.array_equal(results[1].returns, results[3].returns)
    assert np.array_equal(results[0].returns[:2], results[1].returns)

    # A model that gathers its weights (the GPU path): the gather materializer on its device.
    model = make_model("mlp", 2, env.observation_spec, env.action_spec, hidden_sizes=(4,),
                       device="/CPU:1", implementation="gather")
    with Evaluator(env, model, decoder.decode_batch, workers=2) as evaluator:
        gathered = evaluator.evaluate(request)
        graph = evaluator._traced.graph.function(False, False, 3).graph
    ops = []
    def collect(g):
        ops.extend(g.get_operations())
        for f in g._functions.values():
            collect(f.graph)
    collect(graph)
    assert not any(op.type == "NeuroevoMaterialize" for op in ops)
    built = [op for op in ops if "materialize/" in op.name]
    assert built and all(op.device.endswith("CPU:1") for op in built), built[:3]
    with Evaluator(env, model, decoder.decode_batch, workers=2, rollout="step") as evaluator:
        assert np.array_equal(gathered.returns, evaluator.evaluate(request).returns)
    print("OK")
    """
)


def test_placement_on_two_logical_devices():
    done = subprocess.run(
        [sys.executable, "-c", PLACEMENT_SCRIPT], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and "OK" in done.stdout, done.stdout + done.stderr[-3000:]


def test_a_worker_that_sees_the_stop_only_at_its_next_chunk_reports_no_error(monkeypatch, rng):
    """A worker failing stops the evaluation; another worker may already be past its stop check
    and call one more chunk, which the stop request ends before its first iteration. That
    chunk returns no records (every kind: behaviour, flags, observation moments) and no error,
    so the evaluation reports the failing worker's own error."""
    seed = int(rng.integers(1 << 31))  # the rng fixture prints its own seed for a replay
    env, model = _setup("maze", 4)
    decoder = GenomeDecoder(
        NoiseTable(seed % 1000, size=model.num_params + 1000, cache_dir=False),
        model.init_scales(),
    )
    decoder.set_center(0, (0.1 * rng.normal(size=model.num_params)).astype(np.float32))
    genomes = [ESGenome(0, int(rng.integers(1000)), s, 0.05) for s in (1, -1)] * 3
    request = EvalRequest(genomes, rng.integers(0, 2**62, (6, 1)), sample_obs=np.ones((6, 1), bool))
    original = rollout_module.GraphWorker._chunk
    late: list[tuple[bool, list[np.ndarray]]] = []

    def chunk(worker):
        shared = worker._shared
        if worker.slots[0] == 0:  # past its stop check when the other worker fails
            assert shared.stop.wait(60)
            recorded = []
            monkeypatch.setattr(worker, "_record", recorded.append)
            late.append((original(worker), recorded))
            return False
        shared.stop.set()  # as WorkerThread.run does on a failure, then the evaluator halts
        shared.graph.halt()
        raise RuntimeError("the second worker's own failure")

    monkeypatch.setattr(rollout_module.GraphWorker, "_chunk", chunk)
    behavior = BehaviorParams(kind="trajectory", every=7, samples=4)
    evaluator = Evaluator(env, model, decoder.decode_batch, workers=2, behavior=behavior)
    with evaluator, pytest.raises(EvaluationError, match="the second worker's own failure"):
        evaluator.evaluate(request, max_steps=20)
    [(going_on, [records])] = late
    assert going_on  # the queue was never claimed: not drained
    assert len(records) == 3 + 1 + 1 + 4  # counts, sums, ends; behaviour; env flags; moments
    assert all(len(r) == 0 for r in records)
    env.close()


def test_a_stop_ends_running_chunks_and_the_evaluator_runs_again():
    """A failing progress callback stops the graph workers mid-chunk (chunks far longer than
    the evaluation); the next evaluation on the same evaluator runs every episode."""
    rng = np.random.default_rng(3)
    env, model = _setup("maze", 2)
    decoder = GenomeDecoder(
        NoiseTable(0, size=model.num_params + 1000, cache_dir=False), model.init_scales()
    )
    request = EvalRequest([GAGenome(i) for i in range(6)], rng.integers(0, 2**31, (6, 1)))

    def fail(progress):
        raise RuntimeError("stop here")

    with Evaluator(env, model, decoder.decode_batch, workers=2, chunk_steps=10**6) as evaluator:
        with pytest.raises(RuntimeError, match="stop here"):
            evaluator.evaluate(request, progress=fail, progress_interval_s=0.0)
        results = evaluator.evaluate(request)
    assert (results.lengths > 0).all()
    assert results.stats.episodes == 6


def test_evaluators_of_one_env_and_model_share_their_traced_functions():
    """A new evaluator of the same env, model and noise table reuses the traced functions
    (no new trace on its first call) and scores as the first; two never run at once; another
    noise table gets its own."""
    rng = np.random.default_rng(5)
    env, model = _setup("maze", 2)
    noise = NoiseTable(0, size=model.num_params + 1000, cache_dir=False)
    decoder = GenomeDecoder(noise, model.init_scales())
    request = EvalRequest([GAGenome(i) for i in range(4)], rng.integers(0, 2**31, (4, 1)))
    first = Evaluator(env, model, decoder.decode_batch, workers=2)
    reference = first.evaluate(request, max_steps=30)
    second = Evaluator(env, model, decoder.decode_batch, workers=1)
    assert second._traced is first._traced
    _assert_same(reference, second.evaluate(request, max_steps=30), "second evaluator")
    assert first._traced.busy.acquire(blocking=False)  # as an evaluation of `first` would
    with pytest.raises(RuntimeError, match="another evaluator of this env and model"):
        second.evaluate(request, max_steps=30)
    first._traced.busy.release()
    first.close()
    _assert_same(reference, second.evaluate(request, max_steps=30), "after closing the first")
    other = GenomeDecoder(
        NoiseTable(0, size=model.num_params + 1000, cache_dir=False), model.init_scales()
    )
    third = Evaluator(env, model, other.decode_batch, workers=2)
    assert third._traced is not second._traced
    _assert_same(reference, third.evaluate(request, max_steps=30), "another noise table")
    second.close()
    third.close()
    env.close()


def test_tail_counts_the_time_with_fewer_than_half_the_slots_running():
    """Two workers of 2 slots: 4 running for 1 s, 2 for 1 s (not the tail), 1 for 2 s."""
    from neuroevo.evaluation.results import EvalStats, WorkerStats

    def worker(slots, rows):
        rows = np.array(rows, np.float64)
        return WorkerStats(slots, {}, np.zeros(0), 0, 0, 0, 0, {}, running=rows)

    a = worker((0, 2), [[0, 0.5, 2], [0.5, 1, 2], [1, 2, 1], [2, 4, 1]])
    b = worker((2, 4), [[0, 1, 2], [1, 2, 1]])
    stats = EvalStats(wall_s=4.0, frames=0, steps=0, episodes=0, workers=(a, b))
    assert stats.tail_s() == pytest.approx(2.0)
    assert stats.tail_s(1.0) == pytest.approx(3.0)
