"""The Ray driver: ``RayEvaluator``, behind the local ``Evaluator``'s ``evaluate`` contract.

``RayEvaluator`` starts long-lived actors (``workers_per_node`` per node, pinned with Ray's
node-affinity scheduling); each calls a picklable *factory* once to build its own env,
population model and genome decoder (the noise table is generated on the node from its seed,
never shipped) and runs a local pipelined ``Evaluator`` over them. What travels:

- to the actors, per chunk: the chunk's genomes packed as seed chains (``pack_genomes``; ES:
  centre id, noise index, sign, sigma), its episode seeds and sampling mask; per generation
  and node, once: each ES centre (``ray.put`` once, fetched by the node's object store) and
  the observation statistics when they changed;
- back, per chunk: per-episode returns, lengths, frames, end flags, env flags, behaviour and
  the sampled episodes' observation moments, plus the chunk's timing.

A generation's ``(genome, episode)`` items are cut into chunks by ``chunking.ChunkQueue``
(large first, smaller near the end) and pulled by whichever actor is free (``ray.wait``). An
actor that dies loses nothing: its unfinished chunks go back to the queue and Ray restarts it
(``max_restarts``); a node that joins is used from the next ``evaluate`` call. Episode ``(i,
j)`` always runs genome ``i`` on seed ``episode_seeds[i, j]``, and observation moments are
merged in the local order, so results equal the local evaluator's whatever the cluster did.

Ray is imported lazily: the single-machine path never needs it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from neuroevo.core.process_state import ProcessChanges, recorded_changes
from neuroevo.evaluation.base import BaseEvaluator, EvalCall, EvaluationError
from neuroevo.evaluation.chunking import Chunk, ChunkPolicy, ChunkQueue
from neuroevo.evaluation.ray.actor import EvaluatorActor, EvaluatorParts
from neuroevo.evaluation.ray.local import RAY_SESSION_ENVIRON, LocalRay, init_local_ray
from neuroevo.evaluation.ray.stats import ClusterEvalStats, ClusterProgress, NodeStats
from neuroevo.evaluation.ray.wire import ChunkResult, ChunkTask, chunk_task
from neuroevo.evaluation.results import TIME_KINDS, EpisodeTable, EvalResults, WorkerStats
from neuroevo.genomes.genome import ESGenome

__all__ = ["ACTOR_START_TIMEOUT_S", "CenterSource", "ClusterConnectionError", "RayEvaluator"]


ACTOR_START_TIMEOUT_S = 600.0
"""How long new actors may take to be placed and built (TF import, env and model) before
``evaluate`` gives up instead of waiting forever for CPUs that never free up."""


class ClusterConnectionError(ConnectionError):
    """The Ray cluster at the given address cannot be reached (a CLI maps this to exit 2)."""


class CenterSource(Protocol):
    """Where the driver finds registered vectors (ES centres, per-parameter scale vectors) by
    id (``GenomeDecoder`` is one)."""

    def center(self, center_id: int) -> np.ndarray: ...


@dataclasses.dataclass
class _ActorState:
    """Driver-side bookkeeping of one actor."""

    handle: Any
    node_id: str
    slots: int
    # After a failure: the ref of an ``info`` call that Ray retries until it has restarted
    # the actor; until it returns the actor gets no chunks.
    probe: Any = None
    # Totals of the current evaluation (``reset`` at its start).
    in_flight: int = 0
    seconds: dict[str, float] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(TIME_KINDS, 0.0)
    )
    calls: int = 0
    steps: int = 0
    frames: int = 0
    episodes: int = 0
    busy_s: float = 0.0

    def reset(self) -> None:
        self.in_flight = self.calls = self.steps = self.frames = self.episodes = 0
        self.busy_s = 0.0
        self.seconds = dict.fromkeys(TIME_KINDS, 0.0)

    def add(self, chunk: Chunk, result: ChunkResult) -> None:
        self.busy_s += result.wall_s
        self.episodes += chunk.size
        self.frames += result.total_frames
        self.steps += result.steps
        self.calls += result.calls
        for kind in TIME_KINDS:
            self.seconds[kind] += result.seconds[kind]


def _check_address(address: str | None, timeout_s: float) -> None:
    """Fails fast with a clear message when ``address`` cannot be a reachable Ray cluster
    (``ray.init`` would otherwise wait minutes on a dead ``host:port``)."""
    if address is None or address in ("auto", "local"):
        return
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ClusterConnectionError(
            f"Ray address {address!r} is not 'auto', 'host:port' or 'ray://host:port'; "
            "use the address `ray start --head` printed, or None to start Ray locally"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ClusterConnectionError(
            f"cannot reach the Ray cluster at {address!r} ({exc}); is the head node running "
            "(`ray start --head`) and the port open?"
        ) from exc


def _join(address: str, init_kwargs: dict[str, Any]) -> None:
    """Connects this process to the Ray cluster at ``address``; an unreachable one is a
    :class:`ClusterConnectionError`."""
    import ray

    try:
        ray.init(address=address, **init_kwargs)
    except ConnectionError as exc:
        raise ClusterConnectionError(
            f"cannot connect to the Ray cluster at {address!r}: {exc}"
        ) from exc


class RayEvaluator(BaseEvaluator):
    """Evaluates genomes on a Ray cluster; ``evaluate`` is ``BaseEvaluator``'s contract, with
    ``ClusterEvalStats`` as ``results.stats`` and ``ClusterProgress`` passed to ``progress``.
    ES genomes need ``centers`` (a ``ValueError`` otherwise); an evaluation that fails on an
    actor, or every actor dying for good, is an ``EvaluationError``.

    Args:
        factory: picklable zero-argument callable that builds an actor's ``EvaluatorParts``
            (``neuroevo.run.assemble.NodeFactory``); called once per actor, on its node.
        address: None to attach to the Ray of this process or start one locally (without
            the dashboard, ended with this process even if it is killed:
            ``ray.local.init_local_ray``), ``"auto"``
            for the cluster this machine belongs to, ``"host:port"`` of a head node or
            ``"ray://host:port"`` of a Ray client server. Checked even when this process
            already runs Ray (which is then used as is).
        workers_per_node: actors per node; each gets an equal share of the node's CPUs.
        centers: where ES centres are found by id (the optimizer's ``decoder``); needed to
            evaluate ``ESGenome``s. The ``centers`` attribute may be changed later.
        policy: chunk sizes (default: at least one actor's slot count per chunk); the
            ``policy`` attribute may be changed between evaluations.
        prefetch: chunks outstanding per actor (2 hides the driver's round trip behind a
            running chunk; 1 keeps the tail shortest).
        max_restarts: restarts of a dying actor (by Ray); an actor dead for good is dropped
            and replaced at the next ``evaluate`` call if its node is still there.
        init_kwargs: extra ``ray.init`` arguments when this evaluator starts or connects to
            Ray (e.g. ``runtime_env``, ``num_cpus``).
        connect_timeout_s: how long to try reaching ``address`` before failing.

    Raises:
        ClusterConnectionError: ``address`` is malformed or unreachable.
        ValueError: bad ``workers_per_node``, ``prefetch`` or ``max_restarts``.
        ImportError: Ray is not installed (``pip install "neuroevo[ray]"``).
    """

    def __init__(
        self,
        factory: Callable[[], EvaluatorParts],
        *,
        address: str | None = None,
        workers_per_node: int = 1,
        centers: CenterSource | None = None,
        policy: ChunkPolicy | None = None,
        prefetch: int = 1,
        max_restarts: int = 3,
        init_kwargs: dict[str, Any] | None = None,
        connect_timeout_s: float = 5.0,
    ):
        if workers_per_node < 1:
            raise ValueError(f"workers_per_node must be >= 1, got {workers_per_node}")
        if prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, got {prefetch}")
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
        try:
            import ray
        except ImportError as exc:
            raise ImportError('the Ray backend needs Ray: pip install "neuroevo[ray]"') from exc
        self._factory = factory
        self._workers_per_node = workers_per_node
        self.centers = centers
        self.policy = policy
        self._prefetch = prefetch
        self._max_restarts = max_restarts
        self._owns_ray = False
        self._local_ray: LocalRay | None = None
        self._ray_changes: ProcessChanges | None = None
        _check_address(address, connect_timeout_s)
        if not ray.is_initialized():
            try:
                # ray.init installs a SIGTERM handler, sets PYTHONBREAKPOINT and more, which
                # close() undoes: the process is left as this evaluator found it.
                with recorded_changes(keep_environ=RAY_SESSION_ENVIRON) as self._ray_changes:
                    if address in (None, "local"):  # a node of our own: must not outlive us
                        self._local_ray = init_local_ray(**(init_kwargs or {}))
                    else:
                        _join(address, init_kwargs or {})
            except BaseException:
                self._ray_changes.undo()
                raise
            self._owns_ray = True
        self._actors: list[_ActorState] = []
        self._obs_stats: tuple[int, Any, int] | None = None  # version, ref, bytes
        self._obs_stats_version = 0
        self._obs_stats_nodes: set[str] = set()  # nodes that received the current version

    def close(self) -> None:
        """Ends the actors, and Ray itself when this evaluator started or connected it; then
        puts back what starting Ray changed in the process (signal handlers, environment
        variables, ``faulthandler``: :mod:`neuroevo.core.process_state`)."""
        import ray

        for actor in self._actors:
            ray.kill(actor.handle, no_restart=True)
        self._actors = []
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
        if self._local_ray is not None:
            self._local_ray.stop()
            self._local_ray = None
        if self._ray_changes is not None:
            self._ray_changes.undo()
            self._ray_changes = None

    @property
    def actors(self) -> list[Any]:
        """The live actor handles (e.g. to kill one in a fault test)."""
        return [a.handle for a in self._actors]

    def set_obs_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Observation statistics for the actors' models (``model.set_obs_stats``), sent to
        each node with its next chunk; the driver's own model is not touched."""
        import ray

        value = (np.asarray(mean, np.float32), np.asarray(std, np.float32))
        self._obs_stats_version += 1
        nbytes = value[0].nbytes + value[1].nbytes
        self._obs_stats = (self._obs_stats_version, ray.put(value), nbytes)
        self._obs_stats_nodes = set()

    def _sync_actors(self) -> None:
        """Drops actors of nodes that left and starts actors on nodes that joined, then waits
        until every actor is built."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
        self._actors = [a for a in self._actors if a.node_id in alive]
        known = {a.node_id for a in self._actors}
        remote = ray.remote(EvaluatorActor)
        new = []
        for node_id, node in alive.items():
            cpus = node["Resources"].get("CPU", 0.0)
            if node_id in known or cpus <= 0:
                continue
            share = cpus / self._workers_per_node
            for _ in range(self._workers_per_node):
                handle = remote.options(
                    num_cpus=share,
                    max_restarts=self._max_restarts,
                    max_task_retries=0,  # a lost chunk is re-queued by the driver instead
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                ).remote(self._factory, share)
                new.append(handle)
        try:
            infos = ray.get([h.info.remote() for h in new], timeout=ACTOR_START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError as exc:
            for handle in new:
                ray.kill(handle, no_restart=True)
            raise EvaluationError(
                f"{len(new)} evaluator actors did not start within {ACTOR_START_TIMEOUT_S:.0f} s: "
                "the cluster has no free CPUs for them (is another evaluator or job holding them?)"
            ) from exc
        except ray.exceptions.RayError as exc:
            for handle in new:
                ray.kill(handle, no_restart=True)
            raise EvaluationError(f"an evaluator actor failed to start:\n{exc}") from exc
        self._actors += [_ActorState(h, n, s) for h, (n, s) in zip(new, infos, strict=True)]
        if not self._actors:
            raise EvaluationError("the Ray cluster has no node with CPUs for evaluator actors")

    def _evaluate(self, call: EvalCall) -> EvalResults:
        import ray

        genomes, seeds, progress = call.genomes, call.seeds, call.progress
        progress_interval_s = call.progress_interval_s
        center_ids = sorted({i for g in genomes if isinstance(g, ESGenome) for i in g.vector_ids})
        if center_ids and self.centers is None:
            raise ValueError(
                "ES genomes need their centres: pass centers=<the optimizer's decoder> to "
                "RayEvaluator"
            )
        cpu_start, start = time.process_time(), time.time()
        self._sync_actors()
        centers = {c: np.asarray(self.centers.center(c), np.float32) for c in center_ids}
        center_refs = {c: ray.put(v) for c, v in centers.items()}
        shared = {
            "centers": center_refs,
            "obs_stats": None if self._obs_stats is None else self._obs_stats[:2],
        }
        run = _Generation(call, start)
        run.shared = shared
        run.center_bytes = sum(v.nbytes for v in centers.values())
        for actor in self._actors:
            actor.reset()
        policy = self.policy or ChunkPolicy(min_items=min(a.slots for a in self._actors))
        queue = ChunkQueue(seeds.size, policy)
        in_flight: dict[Any, tuple[_ActorState, Chunk]] = {}
        next_report = start + progress_interval_s
        while queue.remaining or in_flight:
            self._fill(run, queue, in_flight)
            probes = {a.probe: a for a in self._actors if a.probe is not None}
            if not in_flight and not probes:
                raise EvaluationError(
                    f"every evaluator actor died for good with {queue.remaining} episodes left"
                )
            wait_s = progress_interval_s if progress is not None else 0.5
            ready, _ = ray.wait([*in_flight, *probes], num_returns=1, timeout=wait_s)
            for ref in ready:
                if ref in probes:
                    self._check_probe(probes[ref])
                else:
                    self._collect(run, queue, in_flight, ref)
            if progress is not None and time.time() >= next_report:
                progress(self._progress(run, seeds.size))
                next_report = time.time() + progress_interval_s
        end = time.time()
        if progress is not None:
            progress(self._progress(run, seeds.size))
        stats = ClusterEvalStats(
            wall_s=end - start,
            frames=run.total_frames,
            steps=run.total_steps,
            episodes=seeds.size,
            workers=tuple(self._worker_stats(a) for a in self._actors),
            nodes=self._node_stats(end - start),
            sent_bytes=run.sent_bytes,
            received_bytes=run.received_bytes,
            shared_bytes=run.shared_bytes,
            driver_cpu_s=time.process_time() - cpu_start,
            chunks=run.chunks,
            requeued=run.requeued,
        )
        return run.results(stats)

    def _fill(
        self, run: _Generation, queue: ChunkQueue, in_flight: dict[Any, tuple[_ActorState, Chunk]]
    ) -> None:
        """Sends chunks to every actor holding fewer than ``prefetch``."""
        for actor in self._actors:
            while actor.probe is None and actor.in_flight < self._prefetch:
                chunk = queue.take(len(self._actors) * self._prefetch)
                if chunk is None:
                    return
                task = pickle.dumps(run.task(chunk), protocol=5)
                in_flight[actor.handle.evaluate.remote(task, run.shared)] = (actor, chunk)
                actor.in_flight += 1
                run.sent_bytes += len(task)
                if actor.node_id not in run.nodes_reached:  # centres: once per call and node
                    run.nodes_reached.add(actor.node_id)
                    run.shared_bytes += run.center_bytes
                if self._obs_stats and actor.node_id not in self._obs_stats_nodes:
                    self._obs_stats_nodes.add(actor.node_id)  # statistics: once per version
                    run.shared_bytes += self._obs_stats[2]

    def _collect(
        self,
        run: _Generation,
        queue: ChunkQueue,
        in_flight: dict[Any, tuple[_ActorState, Chunk]],
        ref: Any,
    ) -> None:
        """Records a finished chunk, or re-queues it when its actor died.

        Raises:
            EvaluationError: the chunk's evaluation failed (not retried: it would fail again).
        """
        import ray

        actor, chunk = in_flight.pop(ref)
        actor.in_flight -= 1
        try:
            payload = ray.get(ref)
        except ray.exceptions.RayActorError:
            queue.requeue(chunk)
            run.requeued += 1
            if actor.probe is None:  # its other lost chunks need no second probe
                self._lost(actor)
            return
        except ray.exceptions.RayTaskError as exc:
            self._cancel(in_flight)
            raise EvaluationError(f"evaluation failed on node {actor.node_id}:\n{exc}") from exc
        run.received_bytes += len(payload)
        result: ChunkResult = pickle.loads(payload)
        run.record(chunk, result)
        actor.add(chunk, result)

    @staticmethod
    def _lost(actor: _ActorState) -> None:
        """Waits for Ray to restart ``actor``: a call retried until the actor is back (it
        fails only once the actor is dead for good, its ``max_restarts`` spent)."""
        actor.probe = actor.handle.info.options(max_task_retries=-1).remote()

    def _check_probe(self, actor: _ActorState) -> None:
        """The actor is back after a failure, or is dead for good and dropped."""
        import ray

        probe, actor.probe = actor.probe, None
        try:
            ray.get(probe)
        except ray.exceptions.RayActorError:
            ray.kill(actor.handle, no_restart=True)
            self._actors.remove(actor)

    @staticmethod
    def _cancel(in_flight: dict[Any, Any]) -> None:
        import ray

        for ref in in_flight:
            with contextlib.suppress(ray.exceptions.RayError):  # already finished or lost
                ray.cancel(ref)

    def _node_stats(self, elapsed_s: float) -> tuple[NodeStats, ...]:
        by_node: dict[str, list[_ActorState]] = {}
        for actor in self._actors:
            by_node.setdefault(actor.node_id, []).append(actor)
        return tuple(
            NodeStats(
                node_id=node,
                actors=len(actors),
                episodes=sum(a.episodes for a in actors),
                frames=sum(a.frames for a in actors),
                steps=sum(a.steps for a in actors),
                busy_s=sum(a.busy_s for a in actors),
                elapsed_s=elapsed_s,
            )
            for node, actors in by_node.items()
        )

    def _progress(self, run: _Generation, total: int) -> ClusterProgress:
        elapsed = time.time() - run.start
        shares = []
        for actor in self._actors:
            seconds = dict(actor.seconds, wait=max(elapsed - actor.busy_s, 0.0))
            spent = sum(seconds.values())
            shares.append({k: v / spent if spent > 0 else 0.0 for k, v in seconds.items()})
        return ClusterProgress(
            episodes_done=sum(a.episodes for a in self._actors),
            episodes_total=total,
            steps=sum(a.steps for a in self._actors),
            frames=sum(a.frames for a in self._actors),
            elapsed_s=elapsed,
            shares=tuple(shares),
            nodes=self._node_stats(elapsed),
        )

    @staticmethod
    def _worker_stats(actor: _ActorState) -> WorkerStats:
        empty = np.zeros((0, 2))
        return WorkerStats(
            slots=(0, actor.slots),
            seconds=dict(actor.seconds),
            dispatch=np.zeros(0),
            calls=actor.calls,
            steps=actor.steps,
            frames=actor.frames,
            episodes=actor.episodes,
            intervals={"env": empty, "net": empty, "load": empty},
        )


class _Generation:
    """The driver's view of one ``evaluate`` call: its request, cut into tasks, and the
    episode table that completed chunks fill."""

    def __init__(self, call: EvalCall, start: float):
        self.call = call
        self.start = start
        self.flat_seeds = call.seeds.reshape(-1)
        self.table = EpisodeTable(*call.seeds.shape)
        self.total_frames = self.total_steps = 0
        # What the driver sent and received (``ClusterEvalStats``).
        self.shared: dict[str, Any] = {"centers": {}, "obs_stats": None}
        self.center_bytes = 0
        self.nodes_reached: set[str] = set()
        self.sent_bytes = self.received_bytes = self.shared_bytes = 0
        self.chunks = self.requeued = 0

    def task(self, chunk: Chunk) -> ChunkTask:
        call = self.call
        return chunk_task(
            chunk,
            call.genomes,
            call.episodes_per_genome,
            self.flat_seeds,
            call.sample_obs,
            call.max_steps,
            call.action_noise_std,
        )

    def record(self, chunk: Chunk, result: ChunkResult) -> None:
        self.total_frames += result.total_frames
        self.total_steps += result.steps
        self.chunks += 1
        self.table.merge(result.episodes, chunk.start)

    def results(self, stats: ClusterEvalStats) -> EvalResults:
        return self.table.to_results(stats)
