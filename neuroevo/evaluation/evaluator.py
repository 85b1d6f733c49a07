"""The pipelined evaluator: K worker threads over disjoint slot ranges and one queue of episodes.

``Evaluator.evaluate`` queues every ``(genome, episode)`` pair; each worker thread refills its
finished slots from that queue and steps its running ones. TensorFlow ops release the GIL, so
while one worker runs its networks the others step their environments. Episode ``(i, j)``
always runs genome ``i``'s weights on seed ``episode_seeds[i, j]``, so results do not depend on
the number of workers or on scheduling.

Threads, queues and shutdown live here and in ``worker.py`` only: the env, the model and the
decoder are called as if single-threaded (the env on disjoint slot sets, which the batched-env
protocol allows). A worker's failure stops the others and is raised in the caller as
``EvaluationError`` carrying the worker's traceback; Ctrl-C in the caller stops every worker
before ``KeyboardInterrupt`` propagates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from neuroevo.envs.base import BatchedEnv
from neuroevo.evaluation.base import BaseEvaluator, EvalCall, EvaluationError
from neuroevo.evaluation.behavior import BehaviorParams
from neuroevo.evaluation.materialize import Materializer, plan_genomes
from neuroevo.evaluation.request import check_action_noise_fits
from neuroevo.evaluation.results import (
    EpisodeDataError,
    EpisodeTable,
    EvalProgress,
    EvalResults,
    EvalStats,
)
from neuroevo.evaluation.rollout import DEFAULT_CHUNK_STEPS, GraphRun, GraphWorker, RolloutGraph
from neuroevo.evaluation.step_functions import StepFunctions
from neuroevo.evaluation.traced import Traced, forget, traced_functions
from neuroevo.evaluation.worker import (
    SharedRun,
    SimulatedAccelerator,
    StoppedError,
    Worker,
)
from neuroevo.genomes.genome import GenomeDecoder
from neuroevo.models.base import PopulationModel

Decode = Callable[[Sequence[Any]], np.ndarray]

ROLLOUTS = ("auto", "graph", "step")
"""Where the per-step loop runs: ``graph`` (whole chunks of steps in one TensorFlow call,
``evaluation.rollout``), ``step`` (one Python turn per agent step, ``evaluation.worker``), or
``auto``: ``graph`` when the env declares ``graph_rollout`` (the op envs) and no simulated
latency is asked for, else ``step``."""


def default_device() -> str:
    """Where forward passes run: the first GPU when TensorFlow sees one, else the CPU."""
    return "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"


def inter_op_threads() -> int:
    """TensorFlow's inter-op threads: every graph call of a worker holds one while it runs,
    so workers beyond this count queue behind each other's ops instead of overlapping."""
    configured = tf.config.threading.get_inter_op_parallelism_threads()
    if configured > 0:
        return configured
    from_env = os.environ.get("TF_NUM_INTEROP_THREADS", "")
    if from_env.isdigit() and int(from_env) > 0:
        return int(from_env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def reserve_inter_op_threads(workers: int | None) -> None:
    """Gives TensorFlow at least ``workers`` inter-op threads when that is still possible:
    TensorFlow fixes the count when its runtime starts (after that, ``Evaluator`` warns)."""
    if workers is not None and workers > inter_op_threads():
        with contextlib.suppress(RuntimeError):  # the runtime is already up (a notebook, say)
            tf.config.threading.set_inter_op_parallelism_threads(workers)


def default_workers(num_slots: int, device: str | None = None) -> int:
    """Worker threads for an evaluator of ``num_slots`` slots.

    CPU only: two. Env steps and forwards both spread over all cores through TensorFlow's
    thread pools, so more workers add no compute; a second one runs while the first is in
    Python (dispatch and bookkeeping) and steps its emulators (compute-bound) beside the
    other's forward (memory-bound). More split the slots into smaller batches and need more
    inter-op threads for little gain (docs/PERFORMANCE.md).

    With the network on an accelerator: three, so that while one worker's forward runs on
    the device another steps its emulators and the third is in Python.

    Never more than ``inter_op_threads()`` (see there) nor ``num_slots``.

    Args:
        num_slots: slots of the env and model.
        device: the model's device (``default_device()`` when None).
    """
    device = default_device() if device is None else device
    workers = 3 if "GPU" in device.upper() else 2
    return max(1, min(workers, inter_op_threads(), num_slots))


def split_slots(num_slots: int, workers: int) -> tuple[tuple[int, int], ...]:
    """Contiguous ``(first, end)`` slot ranges, sizes differing by at most one."""
    bounds = np.linspace(0, num_slots, workers + 1).round().astype(int)
    return tuple((int(a), int(b)) for a, b in itertools.pairwise(bounds))


def max_running_per_worker(items: int, workers: int) -> int:
    """Slots one worker keeps running at once, at most: its share of the queue, rounded up.

    Workers claim from one queue; without a cap, the first to claim takes every item of a
    queue shorter than its slots (200 maze robots on two workers of 128 slots: 128 and 72),
    and the other worker idles while the first runs its extra episodes.
    """
    return max(1, -(-items // workers))


@dataclasses.dataclass(eq=False)
class _InFlight:
    """Decoded weights of one genome, kept until all its episodes have been taken."""

    untaken: int
    ready: threading.Event = dataclasses.field(default_factory=threading.Event)
    weights: np.ndarray | None = None


class WorkQueue:
    """The pending ``(genome, episode)`` items, genome-major, shared by the workers.

    A genome's weights are decoded once, by the first worker that takes one of its episodes,
    and kept until its last episode is taken; workers that take other episodes meanwhile wait
    for that decode instead of repeating it.
    """

    def __init__(
        self,
        genomes: Sequence[Any],
        episode_seeds: np.ndarray,
        decode: Decode,
        num_params: int,
        stop: threading.Event,
    ):
        self._genomes = genomes
        self._seeds = episode_seeds.reshape(-1)
        self._decode = decode
        self._num_params = num_params
        self._stop = stop
        self.episodes_per_genome = episode_seeds.shape[1]
        self._lock = threading.Lock()
        self._next = 0
        self._in_flight: dict[int, _InFlight] = {}

    def take(self, count: int) -> np.ndarray:
        """Up to ``count`` item ids ``genome * episodes_per_genome + episode``, in order."""
        with self._lock:
            first = self._next
            self._next = end = min(first + count, self._seeds.size)
        return np.arange(first, end, dtype=np.int64)

    def seeds(self, items: np.ndarray) -> np.ndarray:
        return self._seeds[items]

    def weights(self, genomes: np.ndarray) -> np.ndarray:
        """float32 ``[len(genomes), num_params]``, one row per listed genome index.

        Raises:
            StoppedError: the evaluation stopped while waiting for another worker's decode.
            ValueError: the decoder returned the wrong shape.
        """
        unique, inverse, counts = np.unique(genomes, return_inverse=True, return_counts=True)
        entries, mine = [], []
        with self._lock:
            for genome, count in zip(unique.tolist(), counts.tolist(), strict=True):
                entry = self._in_flight.get(genome)
                if entry is None:
                    entry = self._in_flight[genome] = _InFlight(self.episodes_per_genome)
                    mine.append((genome, entry))
                entry.untaken -= count
                if entry.untaken == 0:
                    del self._in_flight[genome]
                entries.append(entry)
        if mine:
            decoded = np.asarray(self._decode([self._genomes[g] for g, _ in mine]), np.float32)
            if decoded.shape != (len(mine), self._num_params):
                raise ValueError(
                    f"decode returned shape {decoded.shape} for {len(mine)} genomes, "
                    f"expected {(len(mine), self._num_params)}"
                )
            for (_, entry), row in zip(mine, decoded, strict=True):
                entry.weights = row
                entry.ready.set()
            if len(mine) == len(genomes) and np.array_equal(unique, genomes):
                return decoded  # each genome once, all decoded here, in order: no copy
        for entry in entries:
            while not entry.ready.wait(0.05):
                if self._stop.is_set():
                    raise StoppedError
        return np.stack([entries[k].weights for k in inverse.reshape(-1)])


class Evaluator(BaseEvaluator):
    """Evaluates genomes on a batched env with a population model, pipelined over K workers;
    ``evaluate`` is ``BaseEvaluator``'s contract (a worker's failure is an ``EvaluationError``
    carrying its traceback).

    Slot ``s`` of the env is driven by network slot ``s``; worker ``w`` owns the contiguous
    range ``slot_ranges[w]``. The env and model stay the caller's: ``close`` does not close
    them. Evaluators of the same env, model, device, behaviour and noise table share their
    traced graph functions (``evaluation.traced``): only the first one's first call traces
    them; two of them cannot evaluate at once.

    Args:
        env: the batched env; its ops must accept concurrent calls on disjoint slots.
        model: a population model with ``num_slots == env.num_slots``.
        decode: turns a batch of genomes into float32 ``[k, model.num_params]`` weights.
        workers: worker threads (``default_workers`` when None).
        simulated_latency_s: after every forward call, the worker waits this long for a
            simulated accelerator shared by all workers (``worker.SimulatedAccelerator``):
            no CPU is used, calls queue for the device, and the other workers proceed.
        device: where forward passes run; when None, the model's ``device`` if it names one,
            else ``default_device()``. Env ops run on the CPU.
        stop_timeout_s: how long to wait for workers to stop after an error or Ctrl-C.
        behavior: which behaviour characterisation to record per episode (the env's final
            ``behavior`` when None); see :mod:`neuroevo.evaluation.behavior`.
        rollout: ``auto``, ``graph`` or ``step`` (``ROLLOUTS``). Both give the same results.
            On the graph path, genomes are materialised in the graph when ``decode`` is a
            ``GenomeDecoder``'s ``decode_batch`` (else decoded on the host once per
            evaluation).
        chunk_steps: graph path: agent steps per graph call, i.e. per Python turn of a
            worker (progress reports and stop requests are seen between chunks).

    Raises:
        ValueError: slot counts differ, ``workers`` is not in ``[1, num_slots]``, an unknown
            ``rollout``, ``rollout="graph"`` for an env without ``graph_rollout``, or
            ``chunk_steps < 1``.

    Example:
        Three linear CartPole policies, two episodes each, on two workers:

        >>> import numpy as np
        >>> from neuroevo.envs import make_env
        >>> from neuroevo.evaluation import EvalRequest
        >>> from neuroevo.models import make_model
        >>> env = make_env("gym", "CartPole-v1", num_slots=4, max_episode_steps=20, threads=1)
        >>> model = make_model(
        ...     "mlp", 4, env.observation_spec, env.action_spec, hidden_sizes=[], device="/CPU:0"
        ... )
        >>> weights = np.random.default_rng(0).normal(size=(3, model.num_params))
        >>> decode = lambda genomes: weights[list(genomes)].astype(np.float32)
        >>> request = EvalRequest([0, 1, 2], episode_seeds=np.arange(6).reshape(3, 2))
        >>> with Evaluator(env, model, decode, workers=2) as evaluator:
        ...     results = evaluator.evaluate(request)
        >>> results.returns.shape, bool((results.lengths <= 20).all())
        ((3, 2), True)
    """

    def __init__(
        self,
        env: BatchedEnv,
        model: PopulationModel,
        decode: Decode,
        *,
        workers: int | None = None,
        simulated_latency_s: float = 0.0,
        device: str | None = None,
        stop_timeout_s: float = 10.0,
        behavior: BehaviorParams | None = None,
        rollout: str = "auto",
        chunk_steps: int = DEFAULT_CHUNK_STEPS,
    ):
        if env.num_slots != model.num_slots:
            raise ValueError(
                f"env has {env.num_slots} slots but the model has {model.num_slots}; "
                "slot s of the env is driven by network slot s, so they must match"
            )
        if device is None:
            device = model.device or default_device()
        self.device = device
        workers = default_workers(env.num_slots, self.device) if workers is None else workers
        if not 1 <= workers <= env.num_slots:
            raise ValueError(f"workers must be in [1, {env.num_slots}], got {workers}")
        if workers > inter_op_threads():
            warnings.warn(
                f"{workers} workers but TensorFlow has {inter_op_threads()} inter-op threads: "
                "workers will queue behind each other's ops; call "
                "tf.config.threading.set_inter_op_parallelism_threads(workers) at start-up",
                stacklevel=2,
            )
        if simulated_latency_s < 0:
            raise ValueError(f"simulated_latency_s must be >= 0, got {simulated_latency_s}")
        if rollout not in ROLLOUTS:
            raise ValueError(f"rollout must be one of {ROLLOUTS}, got {rollout!r}")
        if rollout == "graph" and not env.graph_rollout:
            raise ValueError(
                f"rollout='graph' needs an env whose ops run without Python (graph_rollout); "
                f"{type(env).__name__} has none: use rollout='step' or 'auto'"
            )
        if rollout == "graph" and simulated_latency_s > 0:
            raise ValueError("simulated_latency_s needs rollout='step' (a Python-side wait)")
        if isinstance(chunk_steps, bool) or not isinstance(chunk_steps, int) or chunk_steps < 1:
            raise ValueError(f"chunk_steps must be an int >= 1, got {chunk_steps!r}")
        self.rollout = (
            "graph"
            if rollout == "graph"
            or (rollout == "auto" and env.graph_rollout and not simulated_latency_s)
            else "step"
        )
        self.chunk_steps = chunk_steps
        decoder = getattr(decode, "__self__", None)
        self._decoder = decoder if isinstance(decoder, GenomeDecoder) else None
        self._env = env
        self._model = model
        self._decode = decode
        self.simulated_latency_s = float(simulated_latency_s)
        self.slot_ranges = split_slots(env.num_slots, workers)
        self._stop_timeout_s = stop_timeout_s
        noise = None if self._decoder is None else self._decoder.noise
        # Traced once per env, model, device, behaviour and noise table in a process.
        self._traced: Traced | None = traced_functions(env, model, self.device, behavior, noise)
        self._fns: StepFunctions | None = self._traced.fns
        self._busy = threading.Lock()
        self._stop: threading.Event | None = None
        self._stuck = False

    @property
    def workers(self) -> int:
        return len(self.slot_ranges)

    def close(self) -> None:
        """Stops a running evaluation and drops this evaluator's references to the traced
        graph functions (they stay with the model for its next evaluator: ``evaluation.traced``)."""
        stop = self._stop
        if stop is not None:
            stop.set()
            self._halt_graph()
        self._fns = None
        self._traced = None

    def set_obs_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Sets the model's observation statistics (``model.set_obs_stats``)."""
        self._model.set_obs_stats(mean, std)

    def _evaluate(self, call: EvalCall) -> EvalResults:
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("evaluate is already running on this evaluator")
        try:
            traced = self._traced
            if traced is None:
                raise RuntimeError("the evaluator is closed")
            if self._stuck:
                raise RuntimeError("a worker of an earlier evaluation never stopped")
            check_action_noise_fits(call.action_noise_std, self._env.action_spec.discrete)
            if not traced.busy.acquire(blocking=False):
                raise RuntimeError(
                    "evaluate is already running on another evaluator of this env and model"
                )
            try:
                return self._run(call)
            finally:
                traced.busy.release()
        finally:
            self._stop = None
            self._busy.release()

    def _run(self, call: EvalCall) -> EvalResults:
        seeds, sample_obs, progress = call.seeds, call.sample_obs, call.progress
        stop = self._stop = threading.Event()
        wake = threading.Event()  # set by each worker as it ends
        latency = self.simulated_latency_s
        accelerator = SimulatedAccelerator(latency) if latency > 0 else None
        obs_shape = None
        if sample_obs is not None:
            self._fns.observing()  # traced here, not concurrently by the workers
            obs_shape = tuple(self._env.observation_spec.shape)
        table = EpisodeTable(*seeds.shape, obs_shape=obs_shape)
        workers: list[Worker] | list[GraphWorker] | None = None
        if self.rollout == "graph":
            workers = self._graph_workers(call, table, stop, wake)
        if workers is None:
            queue = WorkQueue(call.genomes, seeds, self._decode, self._model.num_params, stop)
            shared = SharedRun(
                self._fns,
                queue,
                table,
                stop,
                wake,
                call.max_steps,
                accelerator,
                sample_obs,
                call.action_noise_std,
                max_running_per_worker(seeds.size, len(self.slot_ranges)),
            )
            workers = [Worker(slots, shared) for slots in self.slot_ranges]
        threads = [
            threading.Thread(target=w.run, name=f"neuroevo-eval-{i}", daemon=True)
            for i, w in enumerate(workers)
        ]
        start = time.time()
        try:
            for thread in threads:
                thread.start()
            next_report = start + call.progress_interval_s
            # Event waits, not Thread.join: a Ctrl-C that interrupts join() can leave a live
            # thread marked as stopped (CPython's bpo-45274 handling).
            while True:
                wake.clear()
                if stop.is_set() or all(w.done.is_set() for w in workers):
                    break
                if progress is None:
                    wake.wait(0.1)  # short, so that a Ctrl-C is seen promptly
                    continue
                wake.wait(min(max(next_report - time.time(), 0.0), 0.1))
                if time.time() >= next_report:
                    progress(self._progress(workers, seeds.size, start))
                    next_report = time.time() + call.progress_interval_s
        except BaseException:  # Ctrl-C or a failing progress callback: stop, then re-raise
            stop.set()
            self._wait_stopped(workers, threads)
            raise
        stop.set()  # all done, or a worker failed and the others must stop
        stuck = self._wait_stopped(workers, threads)
        if stuck:
            raise EvaluationError(
                f"workers {stuck} did not stop within {self._stop_timeout_s} s; "
                "the evaluator is unusable"
            )
        failed = [w for w in workers if w.error is not None]
        if failed:
            exc, text = failed[0].error
            worker = workers.index(failed[0])
            user_error, self._env.callback_error = self._env.callback_error, None
            if user_error is not None:  # the user's code failed, not neuroevo: one line
                raise user_error from exc
            if isinstance(exc, EpisodeDataError):
                raise exc
            raise EvaluationError(f"evaluation worker {worker} failed:\n{text}") from exc
        if self._fns is None:
            raise RuntimeError("the evaluator was closed during evaluate")
        end = time.time()
        if progress is not None:
            progress(self._progress(workers, seeds.size, start))
        stats = EvalStats(
            wall_s=end - start,
            frames=sum(w.frames for w in workers),
            steps=sum(w.steps for w in workers),
            episodes=sum(w.episodes for w in workers),
            workers=tuple(w.stats(start, end) for w in workers),
        )
        return table.to_results(stats)

    def _graph_workers(
        self,
        call: EvalCall,
        table: EpisodeTable,
        stop: threading.Event,
        wake: threading.Event,
    ) -> list[GraphWorker] | None:
        """The graph path's workers, or None when the genomes' plan is too large (the per-step
        path then decodes them as slots need them)."""
        plan = plan_genomes(call.genomes, self._decoder, self._decode, self._model.num_params)
        if plan is None:
            return None
        traced = self._traced
        if traced.graph is None:
            # As the model reads its weights: the custom op on the CPU, gathers elsewhere.
            on_cpu = tf.DeviceSpec.from_string(self.device).device_type == "CPU"
            implementation = getattr(self._model, "implementation", "op" if on_cpu else "gather")
            materializer = Materializer(
                traced.noise, self._model.num_params, self.device, implementation
            )
            traced.graph = RolloutGraph(self._fns, materializer)
        graph = traced.graph
        observing = call.sample_obs is not None
        # Traced here, not concurrently by the workers.
        graph.function(observing, call.action_noise_std != 0, call.seeds.size)
        graph.reset_queue(call.seeds.size)
        with tf.device("/CPU:0"):
            seeds = tf.constant(call.seeds.reshape(-1))
            sampled = tf.constant(
                np.zeros(call.seeds.size, bool) if not observing else call.sample_obs
            )
        run = GraphRun(
            graph=graph,
            plan=graph.materializer.plan_tensors(plan),
            seeds=seeds,
            sampled=sampled,
            observing=observing,
            episodes_per_genome=call.episodes_per_genome,
            table=table,
            stop=stop,
            wake=wake,
            max_steps=call.max_steps,
            action_noise_std=float(call.action_noise_std),
            chunk_steps=self.chunk_steps,
            max_running=max_running_per_worker(call.seeds.size, len(self.slot_ranges)),
        )
        return [GraphWorker(slots, run) for slots in self.slot_ranges]

    def _halt_graph(self) -> None:
        traced = self._traced
        if traced is not None and traced.graph is not None:
            traced.graph.halt()

    def _wait_stopped(self, workers: list[Worker], threads: list[threading.Thread]) -> list[int]:
        """Waits up to the stop timeout for the workers to end; returns those still running."""
        if any(not w.done.is_set() for w in workers):
            self._halt_graph()  # graph workers end their chunk now, not after chunk_steps
        deadline = time.monotonic() + self._stop_timeout_s
        for worker in workers:
            worker.done.wait(max(deadline - time.monotonic(), 0.0))
        stuck = [i for i, w in enumerate(workers) if not w.done.is_set()]
        if stuck:
            self._stuck = True
            if self._traced is not None:  # its loop state is a stuck worker's
                forget(self._model, self._traced)
        else:
            for thread in threads:
                thread.join()  # their run() has returned: immediate
        return stuck

    @staticmethod
    def _progress(workers: list[Worker], total: int, start: float) -> EvalProgress:
        now = time.time()
        shares = []
        for w in workers:
            seconds = w.seconds(start, now)
            elapsed = sum(seconds.values())
            shares.append({k: v / elapsed if elapsed > 0 else 0.0 for k, v in seconds.items()})
        return EvalProgress(
            episodes_done=sum(w.episodes for w in workers),
            episodes_total=total,
            steps=sum(w.steps for w in workers),
            frames=sum(w.frames for w in workers),
            elapsed_s=now - start,
            shares=tuple(shares),
        )
