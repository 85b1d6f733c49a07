"""What the Ray backend reports: per-node throughput and idle share, the cluster's progress,
and the evaluation's statistics with the bytes it put on the wire."""

from __future__ import annotations

import dataclasses

from neuroevo.evaluation.results import EvalProgress, EvalStats

__all__ = ["ClusterEvalStats", "ClusterProgress", "NodeStats"]


@dataclasses.dataclass(frozen=True)
class NodeStats:
    """One node's share of an evaluation (or of the evaluation so far).

    Attributes:
        node_id: Ray's node id.
        actors: evaluator actors on the node.
        episodes, frames, steps: completed on the node.
        busy_s: actor-seconds spent evaluating chunks (summed over the node's actors).
        elapsed_s: wall time of the evaluation so far.
    """

    node_id: str
    actors: int
    episodes: int
    frames: int
    steps: int
    busy_s: float
    elapsed_s: float

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def idle_share(self) -> float:
        """Fraction of the node's actor time with no chunk to evaluate."""
        capacity = self.actors * self.elapsed_s
        return max(0.0, 1.0 - self.busy_s / capacity) if capacity > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class ClusterProgress(EvalProgress):
    """``EvalProgress`` of the whole cluster (``shares``: one time split per actor) plus
    per-node episodes, frames/s and idle share. Counts change as chunks complete."""

    nodes: tuple[NodeStats, ...] = ()


@dataclasses.dataclass(frozen=True)
class ClusterEvalStats(EvalStats):
    """``EvalStats`` of a Ray evaluation (``workers``: one entry per actor, with time totals
    but no per-call intervals) plus what the cluster did.

    Attributes:
        nodes: per-node totals.
        sent_bytes: serialized chunk tasks (genomes, seeds, masks) sent to actors.
        received_bytes: serialized chunk results received.
        shared_bytes: ES centres (once per node and ``evaluate`` call) and observation
            statistics (once per node and ``set_obs_stats``), as fetched by the nodes.
        driver_cpu_s: CPU time of the driver process during the evaluation.
        chunks: chunks completed.
        requeued: chunks re-queued because their actor died.
    """

    nodes: tuple[NodeStats, ...] = ()
    sent_bytes: int = 0
    received_bytes: int = 0
    shared_bytes: int = 0
    driver_cpu_s: float = 0.0
    chunks: int = 0
    requeued: int = 0

    @property
    def wire_bytes(self) -> int:
        """Everything this evaluation put on the network."""
        return self.sent_bytes + self.received_bytes + self.shared_bytes
