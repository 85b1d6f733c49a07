"""Episodes inside one TensorFlow call: the in-graph rollout loop and its worker.

``RolloutGraph.function`` traces a chunk: up to ``chunk_steps`` iterations of a
``tf.while_loop`` over one worker's running slots. Each iteration observes them and runs one
forward pass over all of them, steps them (env op), books the step in one op
(``NeuroevoEpisodeAdvance``: float64 returns summed step by step as the per-step path does,
sign returns, lengths, frames, ended episodes, free slots; behaviour, flags and observation
moments beside it), hands the ended episodes to the chunk's output, and refills free slots from
the evaluation's queue (an atomic claim op shared by the K workers, genome weights built by
``NeuroevoMaterialize`` straight from the noise table, env reset; then ``NeuroevoEpisodeStart``
books the new episodes and lists the running slots for the next iteration). The loop runs
while a slot is running, so no iteration acts on none; a worker's first refill comes before its
first loop. An iteration is a few kernels, not dozens of small TF ops: for small networks the
executor's cost per node, not the arithmetic, is what each step pays. Python is entered once per
chunk: to write the chunk's ended episodes into the ``EpisodeTable`` (vectorised), report
progress and honour stop requests.

Episode ``(i, j)`` runs genome ``i`` on seed ``episode_seeds[i, j]`` whatever slot, worker or
chunk it lands in, and every per-episode number comes from the same ops in the same order as on
the per-step path (``worker.Worker``), so both paths give identical results.

The loop's state lives in tensors passed from one chunk to the next; env slots, network
weights, the action-noise counters and the trajectory buffer stay in their resources as on the
per-step path (``step_functions.StepFunctions``, whose graph pieces this module reuses).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import numpy as np
import tensorflow as tf

from neuroevo.evaluation.materialize import Materializer
from neuroevo.evaluation.results import EpisodeTable, WorkerStats
from neuroevo.evaluation.step_functions import StepFunctions
from neuroevo.evaluation.worker import REFILL_BYTES, WorkerThread
from neuroevo.ops import load

DEFAULT_CHUNK_STEPS = 128
"""Loop iterations (agent steps of a worker's slots) per graph call: Python runs once per
chunk, so this bounds how late progress reports and stop requests (Ctrl-C) are seen."""

_NO_CUTOFF = np.iinfo(np.int64).max


def _empty(shape: list[int | None], dtype: tf.DType) -> tf.Tensor:
    return tf.zeros([0 if d is None else d for d in shape], dtype)


class RolloutGraph:
    """The traced chunk functions of one evaluator, shared by its workers.

    Args:
        fns: the per-step path's graph pieces (env, model, devices, action noise, behaviour).
        materializer: builds refilled slots' weights in the graph.
    """

    def __init__(self, fns: StepFunctions, materializer: Materializer):
        self.fns = fns
        self.materializer = materializer
        self._ops = load("rollout")
        with tf.init_scope(), tf.device("/CPU:0"):
            self.counter = self._ops.neuroevo_claim_counter_make()
            # Read by every loop iteration: a stop request ends the running chunks at once.
            self._halted = tf.Variable(False, trainable=False, name="rollout_halted")
        self.obs_size = fns.obs_size
        behavior = fns.read_behavior_function
        out = behavior.structured_outputs
        self.behavior_spec = (
            None if out is None else tf.TensorSpec([None, *out.shape[1:]], out.dtype)
        )
        self._functions: dict[tuple[bool, bool, bool], Any] = {}
        self._initial_states: dict[tuple[int, bool], tuple[tf.Tensor, ...]] = {}

    def reset_queue(self, items: int) -> None:
        """Starts a new evaluation's queue of ``items`` items (no chunk may be running)."""
        self._ops.neuroevo_claim_counter_reset(self.counter, items)
        self._halted.assign(False, read_value=False)

    def halt(self) -> None:
        """Ends every running chunk after its current iteration (a stop request)."""
        self._halted.assign(True, read_value=False)

    def function(self, observing: bool, noisy: bool, items: int) -> Any:
        """The concrete chunk function for a queue of ``items`` items (traced on first use;
        call before workers start).

        ``noisy``: whether actions get Gaussian noise (continuous actions, std > 0). Without it
        the loop leaves the ~80 noise ops out of every step: adding ``0 * noise`` changes no
        action (only a -0.0 would become +0.0), so both give the per-step path's episodes.

        A queue no longer than the env's slots is drained by each worker's first refill or
        two; the loop then calls the refill as a function of its own instead of inlining it.
        Inlined, the refill's ~100 nodes (genome materialisation, weight load, env reset) are
        walked as dead nodes on every iteration that does not refill; called, each refill
        pays a function call (~0.1-0.2 ms), which is dearer once slots are refilled often.
        """
        refill_often = items > self.fns.env.num_slots
        key = (observing, noisy and self.fns.has_action_noise, refill_often)
        if key not in self._functions:
            self._functions[key] = self._trace(*key)
        return self._functions[key]

    def initial_state(self, slots: int, observing: bool) -> tuple[tf.Tensor, ...]:
        """The loop state of a worker of ``slots`` slots before its first chunk (built once:
        tensors are immutable, and a chunk never writes into its inputs)."""
        key = (slots, observing)
        if key not in self._initial_states:
            self._initial_states[key] = self._build_initial_state(slots, observing)
        return self._initial_states[key]

    def _build_initial_state(self, slots: int, observing: bool) -> tuple[tf.Tensor, ...]:
        counts = np.zeros([slots, 3], np.int64)
        counts[:, 0] = -1
        state = [
            tf.constant(counts),  # per slot: item (-1 when free), length, frames
            tf.zeros([slots, 2], tf.float64),  # per slot: return, sign return
            tf.zeros([0], tf.int32),  # running slots, in slot order
            tf.constant(False),  # queue drained
        ]
        if observing:
            d = self.obs_size
            state += [
                tf.zeros([slots], tf.bool),  # recording
                tf.zeros([slots], tf.int64),  # count
                tf.zeros([slots, d], tf.float64),  # shift
                tf.zeros([slots, d], tf.float64),  # sum
                tf.zeros([slots, d], tf.float64),  # squares
            ]
        return tuple(state)

    def _trace(self, observing: bool, noisy: bool, refill_often: bool) -> Any:
        d = self.obs_size
        state = [
            tf.TensorSpec([None, 3], tf.int64),
            tf.TensorSpec([None, 2], tf.float64),
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([], tf.bool),
        ]
        if observing:
            state += [
                tf.TensorSpec([None], tf.bool),
                tf.TensorSpec([None], tf.int64),
                *[tf.TensorSpec([None, d], tf.float64)] * 3,
            ]
        plan = [
            tf.TensorSpec([None, self.materializer.num_params], tf.float32),
            tf.TensorSpec([None, self.materializer.num_params], tf.float32),
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None], tf.float32),
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None], tf.int64),
        ]
        run = [
            tf.TensorSpec([], tf.int32),  # first slot
            tf.TensorSpec([None], tf.int64),  # seeds per item
            tf.TensorSpec([None], tf.bool),  # sampled per item
            tf.TensorSpec([], tf.int64),  # episodes per genome
            tf.TensorSpec([], tf.int64),  # max steps
            tf.TensorSpec([], tf.float32),  # action noise std
            tf.TensorSpec([], tf.int32),  # chunk steps
            tf.TensorSpec([], tf.int64),  # slots running at most
        ]
        n_state, n_plan = len(state), len(plan)

        def chunk(*args):
            return self._chunk(
                list(args[:n_state]),
                tuple(args[n_state : n_state + n_plan]),
                *args[n_state + n_plan :],
                observing=observing,
                noisy=noisy,
                refill_often=refill_often,
            )

        return tf.function(
            chunk, input_signature=[*state, *plan, *run], autograph=False
        ).get_concrete_function()

    def _chunk(
        self,
        state: list[tf.Tensor],
        plan: tuple[tf.Tensor, ...],
        first_slot: tf.Tensor,
        seeds: tf.Tensor,
        sampled: tf.Tensor,
        episodes_per_genome: tf.Tensor,
        max_steps: tf.Tensor,
        noise_std: tf.Tensor,
        chunk_steps: tf.Tensor,
        max_running: tf.Tensor,
        observing: bool,
        noisy: bool,
        refill_often: bool,
    ):
        fns = self.fns
        env, env_device = fns.env, fns.env_device
        ops = self._ops
        refill_cap = tf.constant(
            max(1, REFILL_BYTES // (4 * self.materializer.num_params)), tf.int64
        )
        # Per ended episode: (item, length, frames), (return, sign return), (terminated,
        # truncated), then the optional records. Element shapes are given so that a chunk
        # that runs no iteration (a stop request seen before its first) returns empty records.
        records_spec = [([None, 3], tf.int64), ([None, 2], tf.float64), ([None, 2], tf.bool)]
        if self.behavior_spec is not None:
            records_spec.append((self.behavior_spec.shape, self.behavior_spec.dtype))
        if fns.has_flags:
            records_spec.append(([None], tf.int32))
        if observing:
            records_spec += [
                ([None], tf.bool),
                ([None], tf.int64),
                ([None, self.obs_size], tf.float64),
                ([None, self.obs_size], tf.float64),
            ]
        records_spec.append(([6], tf.float64))  # per iteration: 5 timestamps, slots stepped

        def new_arrays():
            return [
                tf.TensorArray(
                    dt, size=0, dynamic_size=True, infer_shape=False, element_shape=shape
                )
                for shape, dt in records_spec
            ]

        def refill_slots(counts, sums, tally, free, drained, moments):
            """Refills the slots ``free`` from the queue; returns the new slot state, the
            running slots (continuing and new, in slot order), the drained flag and moments."""
            want = tf.size(free, out_type=tf.int64)

            def refill():
                first, end = ops.neuroevo_claim(self.counter, want)
                claimed = tf.cast(end - first, tf.int32)
                items = tf.range(first, end, dtype=tf.int64)
                pos = free[:claimed]
                slots = first_slot + pos

                def start():
                    genomes = tf.cast(items // episodes_per_genome, tf.int32)
                    params = self.materializer.materialize(plan, genomes)
                    with tf.device(fns.model_device):
                        fns.model.load(slots, params)
                        cleared = fns.model.reset_state(slots)  # before the first forward
                    with tf.control_dependencies([params] + ([] if cleared is None else [cleared])):
                        return fns.reset_slots(slots, tf.gather(seeds, items), noise_std)

                started = tf.cond(claimed > 0, start, lambda: tf.zeros([0], tf.int64))
                return items, pos, started, end - first < want

            def no_refill():
                return (
                    tf.zeros([0], tf.int64),
                    tf.zeros([0], tf.int32),
                    tf.zeros([0], tf.int64),
                    tf.constant(False),
                )

            if not refill_often:  # see `function`
                refill = tf.function(
                    refill, autograph=False, experimental_attributes={"_noinline": True}
                )
            items, pos, started, now_drained = tf.cond(~drained & (want > 0), refill, no_refill)
            with tf.device(env_device):
                counts, sums, tally, running = ops.neuroevo_episode_start(
                    counts, sums, tally, pos, items, started
                )
            if observing:
                recording, count, shift, total, squares = moments
                where = pos[:, None]
                recording = tf.tensor_scatter_nd_update(recording, where, tf.gather(sampled, items))
                count = tf.tensor_scatter_nd_update(count, where, tf.zeros(tf.shape(pos), tf.int64))
                zero_rows = tf.zeros([tf.size(pos), self.obs_size], tf.float64)
                total = tf.tensor_scatter_nd_update(total, where, zero_rows)
                squares = tf.tensor_scatter_nd_update(squares, where, zero_rows)
                moments = [recording, count, shift, total, squares]
            return counts, sums, tally, running, drained | now_drained, moments

        def first_refill(counts, sums, tally, drained, moments):
            """A worker's first refill: every slot is free (an advance over no step lists the
            slots it may fill, as after a step)."""
            none = tf.zeros([0], tf.int32)
            with tf.device(env_device):
                counts, sums, tally, _, _, _, _, free = ops.neuroevo_episode_advance(
                    counts,
                    sums,
                    tally,
                    none,
                    tf.zeros([0], tf.float32),
                    tf.zeros([0], tf.bool),
                    tf.zeros([0], tf.bool),
                    tf.zeros([0], tf.int64),
                    max_steps,
                    refill_cap,
                    max_running,
                )
            return refill_slots(counts, sums, tally, free, drained, moments)

        def cond(i, tally, state, arrays):
            go_on = (i < chunk_steps) & (tf.size(state[2]) > 0)
            return go_on & tf.logical_not(self._halted.read_value())

        def body(i, tally, state, arrays):
            counts, sums, active, drained = state[:4]
            moments = list(state[4:])
            t0 = tf.timestamp()
            # ---- observe and act: one forward over every running slot (never none: see cond)
            with tf.control_dependencies([t0]):
                slots = first_slot + active
            actions, t1, obs = fns.observe_act(slots, noise=noisy)
            with tf.control_dependencies([actions]):
                t2 = tf.timestamp()
            if observing:
                moments = _add_observations(active, obs, self.obs_size, *moments)
            # ---- step the running slots and book it
            with tf.device(env_device):  # the bookkeeping too: host-side state
                with tf.control_dependencies([t2]):
                    result = env.step(slots, actions)
                stepped = [result.reward, result.terminated, result.truncated]
                if fns.trajectory is not None:
                    taken = tf.gather(counts[:, 1], active) + 1
                    with tf.control_dependencies(stepped):
                        stepped.append(fns.trajectory.record(slots, taken, env.behavior))
                with tf.control_dependencies(stepped):
                    now = env.frames(slots)
                counts, sums, tally, ended, ended_counts, ended_sums, ended_flags, free = (
                    ops.neuroevo_episode_advance(
                        counts,
                        sums,
                        tally,
                        active,
                        result.reward,
                        result.terminated,
                        result.truncated,
                        now,
                        max_steps,
                        refill_cap,
                        max_running,
                    )
                )
            records = [ended_counts, ended_sums, ended_flags]
            any_ended = tf.size(ended) > 0
            if self.behavior_spec is not None:
                spec = self.behavior_spec
                records.append(
                    tf.cond(
                        any_ended,
                        lambda: fns.behavior_at_end(first_slot + ended, ended_counts[:, 1]),
                        lambda: _empty(spec.shape, spec.dtype),
                    )
                )
            if fns.has_flags:
                records.append(
                    tf.cond(
                        any_ended,
                        lambda: fns.flags_graph(first_slot + ended),
                        lambda: tf.zeros([0], tf.int32),
                    )
                )
            if observing:
                records += _ended_moments(ended, moments)
                moments[0] = tf.tensor_scatter_nd_update(
                    moments[0], ended[:, None], tf.zeros(tf.shape(ended), tf.bool)
                )
            with tf.control_dependencies(records):
                t3 = tf.timestamp()

            # ---- refill free slots from the queue
            with tf.control_dependencies([t3]):
                free = tf.identity(free)
            counts, sums, tally, running, drained, moments = refill_slots(
                counts, sums, tally, free, drained, moments
            )
            with tf.control_dependencies([running]):
                t4 = tf.timestamp()
            # Stamps between observe (env), forward (net), step and book (env), refill (load),
            # then how many slots the iteration stepped.
            stepped_slots = tf.cast(tf.size(active), tf.float64)
            records.append(tf.stack([t0, t1, t2, t3, t4, stepped_slots]))
            arrays = [a.write(i, r) for a, r in zip(arrays, records, strict=True)]
            return i + 1, tally, [counts, sums, running, drained, *moments], arrays

        tally = tf.zeros([2], tf.int64)
        counts, sums, active, drained = state[:4]
        moments = list(state[4:])
        # A worker's first chunk starts with no running slot: the loop acts only on running
        # slots, so its first refill comes before the loop.
        starting = (tf.size(active) == 0) & ~drained & ~self._halted.read_value()
        counts, sums, tally, active, drained, moments = tf.cond(
            starting,
            lambda: first_refill(counts, sums, tally, drained, moments),
            lambda: (counts, sums, tally, active, drained, moments),
        )
        _, tally, state, arrays = tf.while_loop(
            cond,
            body,
            (tf.constant(0), tally, [counts, sums, active, drained, *moments], new_arrays()),
            parallel_iterations=1,
        )
        outputs = [a.concat() for a in arrays[:-1]]
        stamps = tf.reshape(arrays[-1].stack(), [-1, 6])
        return (*state, tally, stamps, *outputs)


def _ended_moments(ended: tf.Tensor, moments: list[tf.Tensor]) -> list[tf.Tensor]:
    """The observation moments of the slots ``ended``: kept (recorded and seen an observation),
    count, mean, M2 (the per-step path's ``ObsMoments`` arithmetic)."""
    recording, count, shift, total, squares = moments
    keep = tf.gather(recording, ended) & (tf.gather(count, ended) > 0)
    n = tf.cast(tf.maximum(tf.gather(count, ended), 1), tf.float64)[:, None]
    mean_deviation = tf.gather(total, ended) / n
    m2 = tf.maximum(tf.gather(squares, ended) - tf.gather(total, ended) * mean_deviation, 0.0)
    return [keep, tf.gather(count, ended), tf.gather(shift, ended) + mean_deviation, m2]


def _add_observations(
    acting: tf.Tensor,
    obs: tf.Tensor,
    obs_size: int,
    recording: tf.Tensor,
    count: tf.Tensor,
    shift: tf.Tensor,
    total: tf.Tensor,
    squares: tf.Tensor,
) -> list[tf.Tensor]:
    """Adds the finite observations ``obs`` of the recording slots among ``acting`` to their
    shifted sums (the shift is each episode's first observation)."""
    rows = tf.cast(tf.reshape(obs, [-1, obs_size]), tf.float64)
    use = tf.gather(recording, acting) & tf.reduce_all(tf.math.is_finite(rows), 1)
    at = tf.boolean_mask(acting, use)
    rows = tf.boolean_mask(rows, use)
    first = tf.gather(count, at) == 0
    shift = tf.tensor_scatter_nd_update(
        shift, tf.boolean_mask(at, first)[:, None], tf.boolean_mask(rows, first)
    )
    deviation = rows - tf.gather(shift, at)
    total = tf.tensor_scatter_nd_add(total, at[:, None], deviation)
    squares = tf.tensor_scatter_nd_add(squares, at[:, None], tf.square(deviation))
    count = tf.tensor_scatter_nd_add(count, at[:, None], tf.ones(tf.shape(at), tf.int64))
    return [recording, count, shift, total, squares]


@dataclasses.dataclass(frozen=True)
class GraphRun:
    """What every graph worker of one ``evaluate`` call shares.

    Attributes:
        graph: the traced chunk functions.
        plan: the genome plan's tensors (``Materializer.plan_tensors``).
        seeds: int64 tensor of the episode seed per flat item.
        sampled: bool tensor per flat item: observation moments are collected.
        observing: whether any item is sampled.
        episodes_per_genome: episodes per genome.
        table: the result table.
        stop: set to stop every worker.
        wake: set by each worker as it ends.
        max_steps: agent-step cutoff per episode, or None.
        action_noise_std: std of the Gaussian action noise.
        chunk_steps: loop iterations per graph call.
        max_running: slots a worker keeps running at once, at most
            (``evaluator.max_running_per_worker``).
    """

    graph: RolloutGraph
    plan: tuple[tf.Tensor, ...]
    seeds: tf.Tensor
    sampled: tf.Tensor
    observing: bool
    episodes_per_genome: int
    table: EpisodeTable
    stop: threading.Event
    wake: threading.Event
    max_steps: int | None
    action_noise_std: float
    chunk_steps: int
    max_running: int


class GraphWorker(WorkerThread):
    """Drives slots ``[first, end)`` by chunk calls until its episodes and the queue are done.

    The same interface as ``worker.Worker`` (``run`` as thread target, ``done``, ``error``,
    live counters, ``seconds``, ``stats``); ``calls`` counts chunk calls, i.e. Python turns.
    """

    def __init__(self, slots: tuple[int, int], shared: GraphRun):
        super().__init__(slots, shared)
        self._stamps: list[np.ndarray] = []
        graph = shared.graph
        self._fn = graph.function(
            shared.observing, shared.action_noise_std != 0, int(shared.seeds.shape[0])
        )
        self._state = graph.initial_state(slots[1] - slots[0], shared.observing)
        self._n_state = len(self._state)
        self._run_args = (
            tf.constant(slots[0], tf.int32),
            shared.seeds,
            shared.sampled,
            tf.constant(shared.episodes_per_genome, tf.int64),
            tf.constant(_NO_CUTOFF if shared.max_steps is None else shared.max_steps, tf.int64),
            tf.constant(shared.action_noise_std, tf.float32),
            tf.constant(shared.chunk_steps, tf.int32),
            tf.constant(shared.max_running, tf.int64),
        )

    def _loop(self) -> None:
        while not self._shared.stop.is_set() and self._chunk():
            pass

    def _chunk(self) -> bool:
        """One chunk call and its bookkeeping; False once the worker has nothing left to do."""
        shared = self._shared
        called = time.time()
        out = self._fn(*self._state, *shared.plan, *self._run_args)
        n = self._n_state
        self._state = tuple(out[:n])
        (steps, frames), stamps = out[n].numpy().tolist(), out[n + 1].numpy()
        records = [o.numpy() for o in out[n + 2 :]]
        returned = time.time()
        self._calls.append((called, returned))
        self._stamps.append(stamps)
        if stamps.size:  # observe (env), forward (net), step and book (env), refill (load)
            self.env_s += float(np.sum(stamps[:, 1] - stamps[:, 0] + stamps[:, 3] - stamps[:, 2]))
            self.net_s += float(np.sum(stamps[:, 2] - stamps[:, 1]))
            self.load_s += float(np.sum(stamps[:, 4] - stamps[:, 3]))
        self.calls += 1
        self.steps += steps
        self.frames += frames
        self._record(records)
        running = self._state[2].shape[0] > 0
        return running or not bool(self._state[3].numpy())

    def _record(self, records: list[np.ndarray]) -> None:
        counts, sums, flags = records[:3]
        if counts.size == 0:
            return
        items = counts[:, 0]
        rest = records[3:]
        graph, table = self._shared.graph, self._shared.table
        optional = {}
        if graph.behavior_spec is not None:
            optional["behavior"] = rest.pop(0)
        if graph.fns.has_flags:
            optional["flags"] = rest.pop(0)
        genome, episode = np.divmod(items, self._shared.episodes_per_genome)
        table.record(
            genome,
            episode,
            returns=sums[:, 0],
            sign_returns=sums[:, 1],
            lengths=counts[:, 1],
            frames=counts[:, 2],
            terminated=flags[:, 0],
            truncated=flags[:, 1],
            **optional,
        )
        if self._shared.observing:
            keep, count, mean, m2 = rest
            for k in np.flatnonzero(keep).tolist():
                table.record_obs_moments(int(items[k]), int(count[k]), mean[k], m2[k])
        self.episodes += items.size

    def stats(self, wall_start: float, wall_end: float) -> WorkerStats:
        stamps = np.concatenate([s.reshape(-1, 6) for s in self._stamps] or [np.zeros((0, 6))])
        calls = np.array(self._calls, np.float64).reshape(-1, 2)
        in_graph = np.array(
            [s[-1, 4] - s[0, 0] if s.size else 0.0 for s in self._stamps], np.float64
        )
        env = np.concatenate([stamps[:, 0:2], stamps[:, 2:4]])
        return WorkerStats(
            slots=self.slots,
            seconds=self.seconds(wall_start, wall_end),
            dispatch=(calls[:, 1] - calls[:, 0]) - in_graph,
            calls=self.calls,
            steps=self.steps,
            frames=self.frames,
            episodes=self.episodes,
            intervals={
                "env": env[np.argsort(env[:, 0], kind="stable")],
                "net": stamps[:, 1:3],
                "load": stamps[:, 3:5],
            },
            running=stamps[:, [0, 4, 5]],
        )
