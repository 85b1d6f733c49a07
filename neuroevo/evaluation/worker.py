"""One evaluation worker: the rollout loop over a contiguous range of env/network slots.

A worker alternates one graph call per agent step with vectorised numpy bookkeeping; it never
loops over slots in Python. The step call steps the running slots with the actions computed in
the previous call, then observes and runs the forward pass for the slots that go on, so the
worker waits for its network only between calls: that is where a simulated accelerator's
latency goes (``SimulatedAccelerator``: a wait that holds neither the GIL nor a CPU, so the
other workers run). Finished slots are refilled at once from the shared queue of pending
episodes.

Behaviour characterisations are read from the env when an episode ends; in ``trajectory``
mode (:mod:`neuroevo.evaluation.behavior`) the step function also samples them into a
graph-side buffer every ``every`` agent steps.

When asked, a worker also accumulates the observations its networks acted on in sampled
episodes (per episode: count, mean and summed squared deviations, in float64 around the
episode's first observation), which the evaluator merges into observation-normalisation
statistics in a fixed order.

Time is measured inside the graph (``tf.timestamp`` before the env step, after the
observation and after the forward) and around Python's calls, which gives the env / net /
load / python split and the intervals the overlap statistics are computed from.
"""

from __future__ import annotations

import abc
import dataclasses
import threading
import time
import traceback
from typing import Any, Protocol

import numpy as np

from neuroevo.evaluation.results import EpisodeTable, WorkerStats, time_split
from neuroevo.evaluation.step_functions import StepFunctions

REFILL_BYTES = 64 << 20  # weights loaded per refill call, at most (but one network at least)


class StoppedError(Exception):
    """Raised inside a worker when the evaluation's stop event is set; ends the loop quietly."""


class SimulatedAccelerator:
    """A device that runs one forward call at a time, for a fixed time, using no CPU.

    Stands in for a GPU shared by all workers: calls from several workers queue for it, as
    kernels from several threads queue on a GPU's stream, and a worker waiting for it (on a
    lock or in ``time.sleep``) holds no GIL, so the other workers step their envs meanwhile.
    """

    def __init__(self, latency_s: float):
        self.latency_s = latency_s
        self._busy = threading.Lock()

    def run(self) -> None:
        """Blocks until a forward call has had the device for ``latency_s``."""
        with self._busy:
            time.sleep(self.latency_s)


class PendingEpisodes(Protocol):
    """The shared queue a worker draws episodes from (``evaluator.WorkQueue``)."""

    episodes_per_genome: int

    def take(self, count: int) -> np.ndarray:
        """Up to ``count`` flat item ids ``genome * episodes_per_genome + episode``."""

    def seeds(self, items: np.ndarray) -> np.ndarray:
        """int64 episode seeds of the items."""

    def weights(self, genomes: np.ndarray) -> np.ndarray:
        """float32 ``[m, num_params]`` decoded weights, one row per listed genome index."""


class ObservationMoments:
    """Per-slot moments of the observations seen in the sampled episodes of one worker.

    Sums run around each episode's first observation (a shift that keeps float64 sums of
    squares accurate); rows holding a NaN or infinity are skipped.
    """

    def __init__(self, num_slots: int, obs_size: int):
        self.recording = np.zeros(num_slots, bool)
        self._count = np.zeros(num_slots, np.int64)
        self._shift = np.zeros((num_slots, obs_size), np.float64)
        self._sum = np.zeros((num_slots, obs_size), np.float64)
        self._squares = np.zeros((num_slots, obs_size), np.float64)

    def start(self, pos: np.ndarray, record: np.ndarray) -> None:
        """New episodes in slots ``pos``; ``record`` says which of them are sampled."""
        self.recording[pos] = record
        self._count[pos] = 0
        self._sum[pos] = 0.0
        self._squares[pos] = 0.0

    def add(self, pos: np.ndarray, obs: np.ndarray) -> None:
        """Adds one observation row per listed slot (``obs`` rows align with ``pos``)."""
        sampled = self.recording[pos]
        if not sampled.any():
            return
        pos = pos[sampled]
        rows = obs[sampled].reshape(len(pos), -1).astype(np.float64)
        finite = np.isfinite(rows).all(axis=1)
        pos, rows = pos[finite], rows[finite]
        first = self._count[pos] == 0
        self._shift[pos[first]] = rows[first]
        deviation = rows - self._shift[pos]
        self._sum[pos] += deviation
        self._squares[pos] += np.square(deviation)
        self._count[pos] += 1

    def finish(self, pos: np.ndarray) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
        """``(position, count, mean, m2)`` of the sampled episodes ending in slots ``pos``."""
        ended = []
        for p in pos[self.recording[pos] & (self._count[pos] > 0)].tolist():
            count = int(self._count[p])
            mean_deviation = self._sum[p] / count
            m2 = np.maximum(self._squares[p] - self._sum[p] * mean_deviation, 0.0)
            ended.append((p, count, self._shift[p] + mean_deviation, m2))
        self.recording[pos] = False
        return ended


@dataclasses.dataclass(frozen=True)
class SharedRun:
    """What every worker of one ``evaluate`` call shares.

    Attributes:
        fns: the traced graph functions.
        queue: the pending episodes.
        table: the result table (each worker writes disjoint cells).
        stop: set to stop every worker (an error, Ctrl-C, or all done).
        wake: set by each worker as it ends.
        max_steps: agent-step cutoff per episode, or None.
        accelerator: the simulated accelerator forward calls wait for, or None.
        sample_obs: bool per flat item: the episodes whose observations are collected, or
            None for none.
        action_noise_std: std of the Gaussian noise added to every continuous action.
        max_running: slots a worker keeps running at once, at most
            (``evaluator.max_running_per_worker``).
    """

    fns: StepFunctions
    queue: PendingEpisodes
    table: EpisodeTable
    stop: threading.Event
    wake: threading.Event
    max_steps: int | None
    accelerator: SimulatedAccelerator | None
    sample_obs: np.ndarray | None
    action_noise_std: float
    max_running: int


class WorkerThread(abc.ABC):
    """What every kind of worker shares: the thread target (``run``), which keeps a failure
    with its traceback, stops the others and sets ``done`` and the shared ``wake`` event when
    it returns; the live counters the evaluator reads for progress reports; the time split.

    ``shared`` holds at least the ``stop`` and ``wake`` events of the evaluation.
    """

    def __init__(self, slots: tuple[int, int], shared: Any):
        self.slots = slots
        self._shared = shared
        self.done = threading.Event()
        self.error: tuple[BaseException, str] | None = None
        self.env_s = self.net_s = self.load_s = 0.0
        self.calls = self.steps = self.frames = self.episodes = 0
        self.started = self.finished = 0.0
        self._calls: list[tuple[float, float]] = []  # per call, in Python: called, returned

    def run(self) -> None:
        """Thread target: the worker's loop; a failure is kept with its traceback and stops all."""
        self.started = time.time()
        try:
            self._loop()
        except StoppedError:
            pass
        except BaseException as exc:  # surfaced by the evaluator in the caller's thread
            self.error = (exc, traceback.format_exc())
            self._shared.stop.set()
        finally:
            self.finished = time.time()
            self.done.set()
            self._shared.wake.set()

    @abc.abstractmethod
    def _loop(self) -> None:
        """Drives the worker's slots until its work is done or the stop event is set."""

    def seconds(self, wall_start: float, now: float) -> dict[str, float]:
        """Time split (``TIME_KINDS``) from ``wall_start`` to ``now``; outside its run the
        worker counts as waiting."""
        busy = {"env": self.env_s, "net": self.net_s, "load": self.load_s}
        return time_split(busy, self.started, self.finished, wall_start, now)


class Worker(WorkerThread):
    """Drives slots ``[first, end)`` until the queue is empty and its episodes have ended.

    Meant as a thread target (``run``), which sets ``done`` and the shared ``wake`` event when
    it returns. All state is per worker except what ``shared`` holds (the queue, the result
    table, the events); live counters are plain attributes that the evaluator reads for
    progress reports.
    """

    def __init__(self, slots: tuple[int, int], shared: SharedRun):
        super().__init__(slots, shared)
        self._times: list[np.ndarray] = []  # per call, in graph: start, observed, forward done
        self._stepped: list[int] = []  # per call: slots stepped
        self._extra: dict[str, list[tuple[float, float]]] = {"net": [], "load": []}

        first, end = slots
        n = end - first
        self._slot_ids = np.arange(first, end, dtype=np.int32)
        self._item = np.full(n, -1, np.int64)  # flat queue item per slot, -1 when free
        self._return = np.zeros(n, np.float64)
        self._sign_return = np.zeros(n, np.float64)  # sum of sign(reward): sign-rank shaping
        self._length = np.zeros(n, np.int64)
        self._frames = np.zeros(n, np.int64)
        fns = shared.fns
        self._actions = np.zeros((n, *fns.action_shape), fns.action_dtype)
        self._running = np.zeros(0, np.int64)  # positions (into the worker's range) running
        self._free = np.arange(n)
        self._queue_empty = False
        # Observation statistics: ``shared.sample_obs[item]`` says which episodes contribute.
        self._step_fn, self._refill_fn = (fns.step, fns.refill)
        self._moments: ObservationMoments | None = None
        if shared.sample_obs is not None:
            self._step_fn, self._refill_fn = fns.observing()
            self._moments = ObservationMoments(n, fns.obs_size)

    def _loop(self) -> None:
        while not self._shared.stop.is_set():
            if self._free.size and not self._queue_empty:
                self._refill()
            if self._running.size == 0:
                break
            self._step()

    def _simulate_latency(self) -> None:
        start = time.time()
        self._shared.accelerator.run()
        end = time.time()
        self.net_s += end - start
        self._extra["net"].append((start, end))

    def _step(self) -> None:
        pos = self._running
        if self._shared.max_steps is None:
            act_mask = np.ones(pos.size, bool)
        else:
            act_mask = self._length[pos] + 1 < self._shared.max_steps
        called = time.time()
        steps = self._length[pos] + 1
        outputs = [
            o.numpy()
            for o in self._step_fn(self._slot_ids[pos], self._actions[pos], act_mask, steps)
        ]
        reward, terminated, truncated, frames, next_actions, times = outputs[:6]
        returned = time.time()
        self._times.append(times)
        self._stepped.append(pos.size)
        self._calls.append((called, returned))
        self.env_s += float(times[1] - times[0])
        self.net_s += float(times[2] - times[1])
        self.calls += 1
        self.steps += pos.size
        self.frames += int(frames.sum() - self._frames[pos].sum())
        self._return[pos] += reward
        self._sign_return[pos] += np.sign(reward)
        self._length[pos] += 1
        self._frames[pos] = frames
        go_on = act_mask & ~terminated & ~truncated
        self._actions[pos[go_on]] = next_actions
        if self._moments is not None:
            self._moments.add(pos[go_on], outputs[6])
        if self._shared.accelerator is not None and next_actions.shape[0]:
            self._simulate_latency()
        if not go_on.all():
            ended = ~go_on
            # Cut off by max_steps (act_mask False) without the task ending it: truncated.
            self._finish(pos[ended], terminated[ended], truncated[ended] | ~terminated[ended])
            self._running = pos[go_on]

    def _finish(self, pos: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        """Writes the ended episodes of slots ``pos`` into the table and frees the slots."""
        start = time.time()
        slots = self._slot_ids[pos]
        fns = self._shared.fns
        genome, episode = np.divmod(self._item[pos], self._shared.queue.episodes_per_genome)
        optional = {}
        if fns.has_behavior:
            optional["behavior"] = fns.read_behavior(slots, self._length[pos])
        if fns.has_flags:
            optional["flags"] = fns.flags(slots).numpy()
        table = self._shared.table
        table.record(
            genome,
            episode,
            returns=self._return[pos],
            sign_returns=self._sign_return[pos],
            lengths=self._length[pos],
            frames=self._frames[pos],
            terminated=terminated,
            truncated=truncated,
            **optional,
        )
        if self._moments is not None:
            for p, count, mean, m2 in self._moments.finish(pos):
                table.record_obs_moments(int(self._item[p]), count, mean, m2)
        self._item[pos] = -1
        self._free = np.concatenate([self._free, pos])
        self.episodes += pos.size
        self._add_load(start)

    def _refill(self) -> None:
        """Starts the next pending episodes in free slots: decode, load, reset, first forward.

        In chunks of at most ``REFILL_BYTES`` of weights: loading many large networks at once
        costs more per network (transient copies of the whole batch).
        """
        start = time.time()
        chunk = max(1, REFILL_BYTES // (4 * self._shared.fns.num_params))
        while room := min(self._free.size, self._shared.max_running - self._running.size):
            items = self._shared.queue.take(min(room, chunk))
            if items.size == 0:
                self._queue_empty = True
                break
            pos, self._free = self._free[: items.size], self._free[items.size :]
            params = self._shared.queue.weights(items // self._shared.queue.episodes_per_genome)
            slots = self._slot_ids[pos]
            seeds = self._shared.queue.seeds(items)
            noise_std = np.float32(self._shared.action_noise_std)
            outputs = self._refill_fn(slots, params, seeds, noise_std)
            frames, actions = outputs[0].numpy(), outputs[1]
            if self._moments is not None:
                self._moments.start(pos, self._shared.sample_obs[items])
                self._moments.add(pos, outputs[2].numpy())
            self._item[pos] = items
            self._return[pos] = 0.0
            self._sign_return[pos] = 0.0
            self._length[pos] = 0
            self._frames[pos] = frames
            self._actions[pos] = actions.numpy()
            self.frames += int(frames.sum())
            self._running = np.sort(np.concatenate([self._running, pos]))
        self._add_load(start)
        if self._shared.accelerator is not None and self._running.size:
            self._simulate_latency()

    def _add_load(self, start: float) -> None:
        end = time.time()
        self.load_s += end - start
        self._extra["load"].append((start, end))

    def stats(self, wall_start: float, wall_end: float) -> WorkerStats:
        """The final time split and the recorded intervals."""
        times = np.array(self._times, np.float64).reshape(-1, 3)
        net = np.concatenate([times[:, 1:3], np.array(self._extra["net"]).reshape(-1, 2)])
        intervals = {
            "env": times[:, 0:2],
            "net": net[np.argsort(net[:, 0], kind="stable")],
            "load": np.array(self._extra["load"], np.float64).reshape(-1, 2),
        }
        calls = np.array(self._calls, np.float64).reshape(-1, 2)
        return WorkerStats(
            slots=self.slots,
            seconds=self.seconds(wall_start, wall_end),
            dispatch=(calls[:, 1] - calls[:, 0]) - (times[:, 2] - times[:, 0]),
            calls=self.calls,
            steps=self.steps,
            frames=self.frames,
            episodes=self.episodes,
            intervals=intervals,
            running=np.column_stack([times[:, 0], times[:, 2], self._stepped]),
        )
