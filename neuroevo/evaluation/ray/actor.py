"""The body of one Ray actor: a local pipelined ``Evaluator`` over the parts its factory
builds on the node, evaluating pickled chunks (:mod:`neuroevo.evaluation.ray.wire`)."""

from __future__ import annotations

import dataclasses
import os
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from neuroevo.envs.base import BatchedEnv
from neuroevo.evaluation.behavior import BehaviorParams
from neuroevo.evaluation.ray.wire import ChunkResult, ChunkTask, unpack
from neuroevo.evaluation.request import EvalRequest
from neuroevo.evaluation.results import TIME_KINDS, EpisodeTable
from neuroevo.genomes.genome import GenomeDecoder
from neuroevo.models.base import PopulationModel

__all__ = ["EvaluatorActor", "EvaluatorParts"]


@dataclasses.dataclass
class EvaluatorParts:
    """What an actor's factory builds: the pieces of one local ``Evaluator``.

    Attributes:
        env: the node's batched env.
        model: a population model with ``model.num_slots == env.num_slots``.
        decoder: turns genomes into weights; holds the node's noise table and ES centres.
        workers: worker threads of the node's evaluator (``default_workers`` when None).
        behavior: the behaviour characterisation to record (the env's final one when None).
    """

    env: BatchedEnv
    model: PopulationModel
    decoder: GenomeDecoder
    workers: int | None = None
    behavior: BehaviorParams | None = None


class EvaluatorActor:
    """The body of one Ray actor: a local ``Evaluator`` built once by the factory."""

    def __init__(self, factory: Callable[[], EvaluatorParts], cpus: float):
        import ray
        import tensorflow as tf

        from neuroevo.evaluation.evaluator import Evaluator

        # Intra-op threads as many as the CPUs Ray gave the actor, so actors sharing a node
        # do not oversubscribe it.
        tf.config.threading.set_intra_op_parallelism_threads(max(1, int(cpus)))
        parts = factory()
        self._parts = parts
        self._evaluator = Evaluator(
            parts.env,
            parts.model,
            parts.decoder.decode_batch,
            workers=parts.workers,
            behavior=parts.behavior,
        )
        self._center_refs: dict[int, str] = {}  # centre id -> object ref it was set from
        self._obs_stats_version = -1
        self._node_id = ray.get_runtime_context().get_node_id()

    def info(self) -> tuple[str, int]:
        """``(node id, slots)``."""
        return self._node_id, self._parts.env.num_slots

    def pid(self) -> int:
        return os.getpid()

    def evaluate(self, task_bytes: bytes, shared: dict[str, Any]) -> bytes:
        """Evaluates one pickled ``ChunkTask``; returns a pickled ``ChunkResult``.

        ``shared`` holds object refs (not resolved by Ray, fetched here only when new):
        ``centers`` {id: ref of float32 [P]} and ``obs_stats`` (version, ref of (mean, std))
        or None.
        """
        import ray

        task: ChunkTask = pickle.loads(task_bytes)
        centers = shared["centers"]
        for center_id, ref in centers.items():
            # A new ref (one per evaluate call) is fetched even for a known id, so an id
            # reused for another vector (a new run on the same actors) cannot go stale.
            if self._center_refs.get(center_id) != ref.hex():
                keep = max(2, len(centers))
                self._parts.decoder.set_center(center_id, ray.get(ref), keep=keep)
                self._center_refs[center_id] = ref.hex()
        self._center_refs = {c: r for c, r in self._center_refs.items() if c in centers}
        if shared["obs_stats"] is not None and shared["obs_stats"][0] != self._obs_stats_version:
            version, ref = shared["obs_stats"]
            self._parts.model.set_obs_stats(*ray.get(ref))
            self._obs_stats_version = version
        packed = unpack(task.genomes)
        items = np.arange(task.start, task.stop)
        genomes = [packed[g] for g in (items // task.episodes_per_genome - task.first_genome)]
        sample = None if task.sample_obs is None else task.sample_obs.reshape(-1, 1)
        request = EvalRequest(
            genomes,
            task.seeds.reshape(-1, 1),
            action_noise_std=task.action_noise_std,
            sample_obs=sample,
        )
        results = self._evaluator.evaluate(request, max_steps=task.max_steps)
        stats = results.stats
        chunk = ChunkResult(
            episodes=EpisodeTable.from_results(results),
            wall_s=stats.wall_s,
            seconds={k: sum(w.seconds[k] for w in stats.workers) for k in TIME_KINDS},
            calls=sum(w.calls for w in stats.workers),
            steps=stats.steps,
            total_frames=stats.frames,
        )
        return pickle.dumps(chunk, protocol=5)
