"""What an evaluation hands back: per-episode results, live progress and the time split.

Episode results are arrays indexed ``[genome, episode]``, so they never depend on which worker
or slot ran an episode. Timing is recorded per worker as intervals on the wall clock
(``time.time()``; TensorFlow's ``tf.timestamp`` reads the same clock inside the graph), from
which the shares and the cross-worker overlap of the pipeline are computed.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from neuroevo.evaluation.obs_norm import RunningObsStats

#: How a worker's wall time is split. ``env``: stepping and observing environments (in graph);
#: ``net``: forward passes (in graph) plus any simulated accelerator latency; ``load``: refilling
#: slots (decode or wait for another worker's decode, load weights, reset) and reading final
#: behaviour; ``python``: tf.function dispatch and numpy bookkeeping (and GIL waits);
#: ``wait``: idle because no episode is left to start while other workers finish.
TIME_KINDS = ("env", "net", "load", "python", "wait")


def time_split(
    busy: dict[str, float], started: float, finished: float, wall_start: float, now: float
) -> dict[str, float]:
    """A worker's ``TIME_KINDS`` split from ``wall_start`` to ``now``: its ``busy`` seconds
    (env, net, load), Python for the rest of its run, and waiting outside it (``started`` 0:
    not started yet; ``finished`` 0: still running)."""
    if not started:
        return {**dict.fromkeys(TIME_KINDS, 0.0), "wait": max(now - wall_start, 0.0)}
    active = (finished or now) - started
    return {
        **busy,
        "python": max(active - sum(busy.values()), 0.0),
        "wait": max(now - wall_start - active, 0.0),
    }


@dataclasses.dataclass(frozen=True)
class WorkerStats:
    """Where one worker's time went during one ``evaluate`` call.

    Attributes:
        slots: ``(first, end)``: the worker drives env/network slots ``first .. end - 1``.
        seconds: seconds per kind of ``TIME_KINDS``; they sum to the evaluation's wall time.
        dispatch: float64 ``[calls]``, per graph call the seconds spent in the call but
            outside the graph (argument conversion, dispatch, output copies); part of
            ``python``.
        calls: graph calls made: one per agent step of the worker's running slots on the
            per-step path, one per chunk of steps on the graph path (``evaluation.rollout``).
        steps: agent steps taken (summed over slots).
        frames: emulator frames (Atari) or env steps used, including reset frames.
        episodes: episodes completed.
        intervals: ``{"env" | "net" | "load": float64 [m, 2]}``, ``(start, end)`` wall-clock
            seconds of each recorded interval, in order.
        running: float64 ``[iterations, 3]``: per step of the worker's running slots (a loop
            iteration, or a step call), its start and end on the wall clock and how many slots
            it stepped; what ``EvalStats.tail_s`` reads.
    """

    slots: tuple[int, int]
    seconds: dict[str, float]
    dispatch: np.ndarray
    calls: int
    steps: int
    frames: int
    episodes: int
    intervals: dict[str, np.ndarray]
    running: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 3)))

    def shares(self) -> dict[str, float]:
        """Fraction of the wall time per kind (``TIME_KINDS``)."""
        total = sum(self.seconds.values())
        return {k: (v / total if total > 0 else 0.0) for k, v in self.seconds.items()}


@dataclasses.dataclass(frozen=True)
class EvalStats:
    """Throughput and per-worker time split of one ``evaluate`` call."""

    wall_s: float
    frames: int
    steps: int
    episodes: int
    workers: tuple[WorkerStats, ...]

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def python_calls_per_step(self) -> float:
        """Python turns per agent step: graph calls made by the workers over the agent steps
        taken (1 per worker step on the per-step path, about 1 per chunk on the graph path)."""
        calls = sum(w.calls for w in self.workers)
        return calls / self.steps if self.steps else 0.0

    @property
    def python_per_call_s(self) -> float:
        """Mean Python time (dispatch + bookkeeping) per step call, over all workers."""
        calls = sum(w.calls for w in self.workers)
        return sum(w.seconds["python"] for w in self.workers) / calls if calls else 0.0

    @property
    def dispatch_per_call_s(self) -> float:
        """Median time per step call spent in the call but outside the graph."""
        dispatch = np.concatenate([w.dispatch for w in self.workers])
        return float(np.median(dispatch)) if dispatch.size else 0.0

    def tail_s(self, fraction: float = 0.5) -> float:
        """Seconds, from the workers' first step to their last, during which fewer than
        ``fraction`` of the evaluator's slots were running: the tail of a generation, where
        the last long episodes leave most slots idle.

        A worker's slots count as running from the start of each of its steps until its next
        one (its Python turns between chunks included) and as idle after its last step.
        """
        events = []  # (time, change in running slots)
        for w in self.workers:
            rows = w.running
            if len(rows) == 0:
                continue
            counts = rows[:, 2]
            events.append(np.stack([rows[:, 0], np.diff(counts, prepend=0.0)], axis=1))
            events.append(np.array([[rows[-1, 1], -counts[-1]]]))
        if not events:
            return 0.0
        merged = np.concatenate(events)
        merged = merged[np.argsort(merged[:, 0], kind="stable")]
        running = np.cumsum(merged[:, 1])[:-1]
        durations = np.diff(merged[:, 0])
        slots = sum(w.slots[1] - w.slots[0] for w in self.workers)
        return float(durations[running < fraction * slots].sum())

    def overlap_s(self, kind: str, other_kind: str) -> float:
        """Seconds during which a ``kind`` interval of one worker coincides with an
        ``other_kind`` interval of some other worker, summed over workers.

        ``overlap_s("net", "env")`` is the forward time hidden behind other workers' env steps:
        zero with one worker, and what the pipeline exists to make large.
        """
        total = 0.0
        for w, stats in enumerate(self.workers):
            others = [s.intervals[other_kind] for v, s in enumerate(self.workers) if v != w]
            if others:
                total += _covered(stats.intervals[kind], _union(np.concatenate(others)))
        return total


#: Metadata key marking an ``EvalResults`` field as a per-episode array ``[genomes, episodes,
#: ...]``; its value is the array's dtype, or None for an optional array whose dtype (and
#: trailing shape) come from the first values an env provides.
PER_EPISODE = "per_episode"


@dataclasses.dataclass(frozen=True)
class EvalResults:
    """Per-episode outcomes of an evaluation (``BaseEvaluator.evaluate``); arrays are
    ``[genomes, episodes]``.

    The per-episode fields (``EPISODE_FIELDS``) are the single declaration of what an
    evaluation records per episode: ``EpisodeTable`` allocates, fills, merges and hands back
    exactly these, so a new one is a new field here plus the worker line that writes it.

    Attributes:
        returns: float64, the sum of raw rewards.
        sign_returns: float64, the sum of ``sign(reward)`` (steps that scored minus steps
            that lost), which ``centered_sign_rank`` fitness shaping ranks.
        lengths: int64, agent steps.
        frames: int64, emulator frames (``env.frames`` before the slot is reset again).
        terminated: bool, the task ended the episode.
        truncated: bool, the env's cutoff or ``max_steps`` ended it.
        stats: timing of the evaluation.
        behavior: ``[genomes, episodes, *shape]`` final behaviour (e.g. Atari RAM), or None
            when the env provides none.
        flags: int32, the env's end-of-episode flags (``BatchedEnv.flags``: a physics
            blow-up, a NaN action), or None when the env reports none.
        obs_stats: moments of the observations the networks acted on in the sampled episodes
            (``EvalRequest.sample_obs``), merged in ``[genome, episode]`` order so
            they do not depend on scheduling; None when nothing was sampled.
        training_returns: float64 ``[genomes, episodes]``, the returns the optimizer learns
            from when they differ from ``returns`` (the env's ``decrease_training_rewards_by``,
            see :meth:`with_reward_decrease`); None: ``returns``.
        obs_moments: the per-episode moments ``obs_stats`` was merged from, as
            ``(flat cell, count, mean, m2)`` in cell order (flat cell ``genome * episodes +
            episode``); lets a caller that splits a generation into several evaluations (the
            Ray backend) merge them exactly as one evaluation would. None when ``obs_stats`` is.
    """

    returns: np.ndarray = dataclasses.field(metadata={PER_EPISODE: np.float64})
    sign_returns: np.ndarray = dataclasses.field(metadata={PER_EPISODE: np.float64})
    lengths: np.ndarray = dataclasses.field(metadata={PER_EPISODE: np.int64})
    frames: np.ndarray = dataclasses.field(metadata={PER_EPISODE: np.int64})
    terminated: np.ndarray = dataclasses.field(metadata={PER_EPISODE: np.bool_})
    truncated: np.ndarray = dataclasses.field(metadata={PER_EPISODE: np.bool_})
    stats: EvalStats = dataclasses.field(kw_only=True)
    behavior: np.ndarray | None = dataclasses.field(default=None, metadata={PER_EPISODE: None})
    flags: np.ndarray | None = dataclasses.field(default=None, metadata={PER_EPISODE: np.int32})
    obs_stats: RunningObsStats | None = None
    obs_moments: tuple[tuple[int, int, np.ndarray, np.ndarray], ...] | None = None
    training_returns: np.ndarray | None = None

    def with_reward_decrease(self, per_step: float) -> EvalResults:
        """These results with ``training_returns`` = returns - ``per_step`` x length (ARS's
        ``shift``); reported returns stay the env's own. ``per_step`` 0 returns ``self``."""
        if not per_step:
            return self
        return dataclasses.replace(
            self, training_returns=self.returns - float(per_step) * self.lengths
        )

    @property
    def flagged_episodes(self) -> int:
        """Episodes that ended with a nonzero env flag."""
        return 0 if self.flags is None else int(np.count_nonzero(self.flags))

    @property
    def total_frames(self) -> int:
        return int(self.frames.sum())

    @property
    def total_steps(self) -> int:
        return int(self.lengths.sum())

    @property
    def num_episodes(self) -> int:
        return int(self.returns.size)


#: ``EvalResults``' per-episode fields by name, in declaration order.
EPISODE_FIELDS: dict[str, dataclasses.Field] = {
    f.name: f for f in dataclasses.fields(EvalResults) if PER_EPISODE in f.metadata
}


@dataclasses.dataclass(frozen=True)
class EvalProgress:
    """A live snapshot for progress reporting, taken while workers run.

    ``frames`` and ``steps`` count running episodes too, as of each worker's last step call.
    ``shares`` holds each worker's time split so far (``TIME_KINDS``).
    """

    episodes_done: int
    episodes_total: int
    steps: int
    frames: int
    elapsed_s: float
    shares: tuple[dict[str, float], ...]

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.elapsed_s if self.elapsed_s > 0 else 0.0


class EpisodeDataError(ValueError):
    """An env returned per-episode data (a behaviour, flags) whose shape differs between
    episodes; evaluators report it as is, in one line."""


class EpisodeTable:
    """The per-episode arrays of one evaluation (``EPISODE_FIELDS``), filled in
    place by workers, or chunk by chunk by the Ray driver.

    Each ``(genome, episode)`` cell is written by exactly one worker, so only lazy allocations
    and the moments dict need the lock. A table pickles (without its lock), which is how a Ray
    actor sends a chunk's episodes back.

    Args:
        num_genomes, episodes: the table's shape.
        obs_shape: shape of one observation when observation moments are collected (a table
            that merges others' moments takes theirs).
    """

    def __init__(self, num_genomes: int, episodes: int, obs_shape: tuple[int, ...] | None = None):
        self.shape = (num_genomes, episodes)
        self.columns: dict[str, np.ndarray] = {
            name: np.zeros(self.shape, field.metadata[PER_EPISODE])
            for name, field in EPISODE_FIELDS.items()
            if field.default is dataclasses.MISSING
        }
        self._obs_shape = obs_shape
        self._obs_moments: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def record(self, genome: np.ndarray, episode: np.ndarray, **values: np.ndarray) -> None:
        """Stores per-episode ``values`` (``name=[m, ...]``, names of
        ``EPISODE_FIELDS``) for cells ``(genome, episode)``; an optional array
        (behaviour, env flags) is allocated on its first values.

        Raises:
            KeyError: a name that is no per-episode field.
        """
        for name, value in values.items():
            if name not in EPISODE_FIELDS:
                raise KeyError(f"{name!r} is not a per-episode field of EvalResults")
            column = self.columns.get(name)
            if column is None:
                dtype = EPISODE_FIELDS[name].metadata[PER_EPISODE] or value.dtype
                with self._lock:
                    column = self.columns.setdefault(
                        name, np.zeros(self.shape + value.shape[1:], dtype)
                    )
            if column.shape[2:] != value.shape[1:]:
                raise EpisodeDataError(
                    f"the env's per-episode {name} has shape {list(value.shape[1:])} but "
                    f"earlier episodes' had {list(column.shape[2:])}; it must have one fixed "
                    "shape (a gymnasium env's env.gym.behavior: a fixed-length vector)"
                )
            column[genome, episode] = value

    def record_obs_moments(self, item: int, count: int, mean: np.ndarray, m2: np.ndarray) -> None:
        """Stores the observation moments of flat cell ``item`` (genome-major)."""
        with self._lock:
            self._obs_moments[item] = (count, mean, m2)

    def merge(self, part: EpisodeTable, first_cell: int) -> None:
        """Writes ``part``'s cells, in flat (genome-major) order, into this table's flat cells
        ``first_cell ..``, with its observation moments (renumbered)."""
        cells = np.arange(first_cell, first_cell + part.size)
        genome, episode = np.divmod(cells, self.shape[1])
        flat = {name: v.reshape(part.size, *v.shape[2:]) for name, v in part.columns.items()}
        self.record(genome, episode, **flat)
        if part._obs_moments:
            self._obs_shape = part._obs_shape
        for item, moments in part._obs_moments.items():
            self.record_obs_moments(first_cell + item, *moments)

    @property
    def size(self) -> int:
        """Cells of the table."""
        return self.shape[0] * self.shape[1]

    @classmethod
    def from_results(cls, results: EvalResults) -> EpisodeTable:
        """The table ``results`` was made from (what ``to_results`` turns back into them)."""
        obs_shape = None if results.obs_stats is None else results.obs_stats.shape
        table = cls(*results.returns.shape, obs_shape=obs_shape)
        for name in EPISODE_FIELDS:
            value = getattr(results, name)
            if value is not None:
                table.columns[name] = value
        for item, *moments in results.obs_moments or ():
            table.record_obs_moments(item, *moments)
        return table

    def _sorted_obs_moments(self) -> tuple[tuple[int, int, np.ndarray, np.ndarray], ...] | None:
        if self._obs_shape is None or not self._obs_moments:
            return None
        return tuple((item, *self._obs_moments[item]) for item in sorted(self._obs_moments))

    def to_results(self, stats: EvalStats) -> EvalResults:
        moments = self._sorted_obs_moments()
        return EvalResults(
            **self.columns,
            stats=stats,
            obs_stats=None if moments is None else merge_obs_moments(self._obs_shape, moments),
            obs_moments=moments,
        )


def merge_obs_moments(
    obs_shape: tuple[int, ...], moments: Sequence[tuple[int, int, np.ndarray, np.ndarray]]
) -> RunningObsStats:
    """Merges per-episode ``(cell, count, mean, m2)`` moments, in the order given, into one
    ``RunningObsStats`` (merging is not associative in floating point: the order matters)."""
    stats = RunningObsStats(obs_shape)
    for _, count, mean, m2 in moments:
        stats.add_moments(count, mean.reshape(obs_shape), m2.reshape(obs_shape))
    return stats


def _union(intervals: np.ndarray) -> np.ndarray:
    """Disjoint, sorted union of ``[m, 2]`` intervals."""
    if len(intervals) == 0:
        return intervals.reshape(0, 2)
    intervals = intervals[np.argsort(intervals[:, 0], kind="stable")]
    reach = np.maximum.accumulate(intervals[:, 1])
    new_group = np.r_[True, intervals[1:, 0] > reach[:-1]]
    group = np.cumsum(new_group) - 1
    starts = intervals[new_group, 0]
    ends = np.zeros(len(starts))
    np.maximum.at(ends, group, reach)
    return np.stack([starts, ends], axis=1)


def _covered(intervals: np.ndarray, union: np.ndarray) -> float:
    """Total length of ``intervals [m, 2]`` that lies inside the disjoint sorted ``union``."""
    if len(intervals) == 0 or len(union) == 0:
        return 0.0
    starts, ends = union[:, 0], union[:, 1]
    before = np.r_[0.0, np.cumsum(ends - starts)]

    def covered_until(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(starts, t, side="right")  # union intervals starting at or before t
        last = np.maximum(i - 1, 0)
        partial = np.clip(t - starts[last], 0.0, ends[last] - starts[last])
        return before[last] + np.where(i > 0, partial, 0.0)

    return float(np.sum(covered_until(intervals[:, 1]) - covered_until(intervals[:, 0])))
