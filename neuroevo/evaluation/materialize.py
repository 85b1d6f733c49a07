"""Genome materialisation inside the graph: a plan of bases and noise terms, and the op.

The in-graph rollout builds a refilled slot's weights with ``NeuroevoMaterialize`` (C++,
``custom_ops/rollout``): row = ``base[b] + sum_k (c_k * noise[i_k : i_k + P]) * s_k``, the same
float32 operations in the same order as :class:`~neuroevo.genomes.genome.GenomeDecoder`, so the
weights are bit-identical to the host decoder's. A :class:`GenomePlan` says, per genome of one
evaluation, which base and terms make it:

- a GA genome: its parent's weights as the base (decoded once per evaluation on the host by the
  decoder, from its parent cache: one multiply-add per parent) plus ``sigma * slice``; an
  initial genome has no base and one term ``1 * (init scales * slice)``;
- an ES genome: its registered centre as the base plus ``(sign * sigma) * slice``, times its
  registered per-parameter scale vector when it has one (PGPE, SNES, CEM, sep-CMA-ES: the plan
  carries each such vector once, as a row of its scale matrix);
- anything else (a genome kind the plan cannot express, or a plain ``decode`` callable): its
  host-decoded weights as the base, no terms.

The noise table enters the graph as a resource: the cached file is memory-mapped read-only
(shared pages, no copy per worker or per process); an in-memory table is copied once per
evaluator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from neuroevo.genomes.genome import ESGenome, GAGenome, GenomeDecoder
from neuroevo.genomes.noise import NoiseTable
from neuroevo.ops import load

__all__ = ["BASES_BUDGET_BYTES", "IMPLEMENTATIONS", "GenomePlan", "Materializer", "plan_genomes"]

IMPLEMENTATIONS = ("op", "gather")

BASES_BUDGET_BYTES = 2 << 30
"""Host-decoded base rows of one evaluation, at most; beyond this the evaluator keeps the
per-step path, which decodes genomes as slots need them."""

INIT_SCALES = 0
"""Row of the plan's scale matrix holding the decoder's initialisation stds."""


@dataclasses.dataclass(frozen=True)
class GenomePlan:
    """How to build each genome of one evaluation (the arrays ``NeuroevoMaterialize`` takes).

    Attributes:
        bases: float32 ``[B, P]``.
        scales: float32 ``[S, P]``: row ``INIT_SCALES`` the initialisation stds, then the
            registered scale vectors the genomes name (no rows without a decoder).
        base_index: int32 ``[G]``, a row of ``bases`` or -1.
        term_offsets: int64 ``[G + 1]``; genome ``g`` has terms ``offsets[g] .. offsets[g+1]``
            (``plan_genomes`` makes at most one per genome; the op takes any number).
        term_coef: float32 ``[T]``.
        term_scale: int32 ``[T]``, a row of ``scales`` or -1 for none.
        term_noise: int64 ``[T]``, start of the noise slice.
    """

    bases: np.ndarray
    scales: np.ndarray
    base_index: np.ndarray
    term_offsets: np.ndarray
    term_coef: np.ndarray
    term_scale: np.ndarray
    term_noise: np.ndarray


def plan_genomes(
    genomes: Sequence[Any],
    decoder: GenomeDecoder | None,
    decode: Callable[[Sequence[Any]], np.ndarray],
    num_params: int,
    budget_bytes: int = BASES_BUDGET_BYTES,
) -> GenomePlan | None:
    """The plan of ``genomes``, or None when its host-decoded bases and scale rows would
    exceed ``budget_bytes`` (the caller then decodes per refill instead).

    Args:
        genomes: one per population member.
        decoder: the decoder whose table and scales the plan's terms refer to (None: every
            genome is host-decoded with ``decode``).
        decode: the evaluator's decode function, for genomes the plan cannot express.
        num_params: P.
    """
    rows: list[np.ndarray] = []
    row_of: dict[Any, int] = {}
    scale_rows: list[np.ndarray] = [] if decoder is None else [decoder.scales]
    scale_row_of: dict[int, int] = {}
    host: list[int] = []  # genomes decoded by ``decode`` into their own base row
    base_index = np.full(len(genomes), -1, np.int32)
    counts = np.zeros(len(genomes), np.int64)
    coef, scale, noise = [], [], []

    def base_row(key: Any, make: Callable[[], np.ndarray]) -> int:
        if key not in row_of:
            row_of[key] = len(rows)
            rows.append(make())
        return row_of[key]

    def scale_row(scale_id: int) -> int:
        if scale_id < 0:
            return -1
        if scale_id not in scale_row_of:
            scale_row_of[scale_id] = len(scale_rows)
            scale_rows.append(decoder.center(scale_id))
        return scale_row_of[scale_id]

    for g, genome in enumerate(genomes):
        if decoder is not None and isinstance(genome, GAGenome):
            parent = genome.parent
            if parent is None:
                terms = [(1.0, INIT_SCALES, genome.init_index)]
            else:
                base_index[g] = base_row(("ga", parent), lambda p=parent: decoder.decode(p))
                index, sigma = genome.mutations[-1]
                terms = [(sigma, -1, index)]
        elif decoder is not None and isinstance(genome, ESGenome):
            center_id = genome.center_id
            base_index[g] = base_row(("es", center_id), lambda c=center_id: decoder.center(c))
            step = genome.sign * genome.sigma  # rounded to float32 as the decoder does
            terms = (
                [] if genome.sign == 0 else [(step, scale_row(genome.scale_id), genome.noise_index)]
            )
        else:
            host.append(g)
            terms = []
        if (len(rows) + len(host) + len(scale_rows)) * 4 * num_params > budget_bytes:
            return None
        counts[g] = len(terms)
        for c, s, i in terms:
            coef.append(np.float32(c))
            scale.append(s)
            noise.append(i)
    if host:
        decoded = np.asarray(decode([genomes[g] for g in host]), np.float32)
        if decoded.shape != (len(host), num_params):
            raise ValueError(
                f"decode returned shape {decoded.shape} for {len(host)} genomes, "
                f"expected {(len(host), num_params)}"
            )
        base_index[host] = np.arange(len(rows), len(rows) + len(host), dtype=np.int32)
        rows.extend(decoded)

    def matrix(vectors: list[np.ndarray]) -> np.ndarray:
        return np.asarray(np.stack(vectors) if vectors else np.zeros((0, num_params)), np.float32)

    return GenomePlan(
        bases=matrix(rows),
        scales=matrix(scale_rows),
        base_index=base_index,
        term_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        term_coef=np.asarray(coef, np.float32),
        term_scale=np.asarray(scale, np.int32),
        term_noise=np.asarray(noise, np.int64),
    )


def noise_table_handle(noise: NoiseTable | None) -> tf.Tensor:
    """A resource handle on ``noise``'s values: the cached ``.npy`` file mapped read-only, or a
    copy of an in-memory table (a one-value table for None: plans without terms). Made
    eagerly, so graph functions can capture it."""
    ops = load("rollout")
    with tf.init_scope(), tf.device("/CPU:0"):
        if noise is None:
            return ops.neuroevo_noise_table_from_tensor(np.zeros(1, np.float32))
        if noise.path is None:
            return ops.neuroevo_noise_table_from_tensor(np.asarray(noise.get(0, len(noise))))
        with open(noise.path, "rb") as file:
            major, _ = np.lib.format.read_magic(file)
            read_header = (
                np.lib.format.read_array_header_1_0
                if major == 1
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read_header(file)
            offset = file.tell()
        if dtype != np.float32 or shape != (len(noise),):
            raise ValueError(f"{noise.path} does not hold {len(noise)} float32 values")
        return ops.neuroevo_noise_table_map(str(noise.path), offset, len(noise))


class Materializer:
    """Builds weight rows in the graph for the genomes of a ``GenomePlan``.

    Two implementations give the same bits, named as the models' (``models.layers``):

    * ``"op"`` (CPU): ``NeuroevoMaterialize`` reads the table where it lies (memory-mapped).
    * ``"gather"`` (GPUs and other devices, where the op has no kernel): the table is copied once
      to the device and a genome's row is its base row plus its gathered noise slice times the
      coefficient, times the scale row, one TensorFlow op per multiply or add. It relies on the
      plan having at most one term per genome, which ``plan_genomes`` guarantees.

    Args:
        noise: the table the plan's terms index (None for plans without terms).
        num_params: P.
        device: where the weights are built (the model's device).
        implementation: ``"op"`` or ``"gather"``.
    """

    def __init__(
        self, noise: NoiseTable | None, num_params: int, device: str, implementation: str = "op"
    ):
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(
                f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}"
            )
        self.device = device
        self.num_params = int(num_params)
        self.implementation = implementation
        if implementation == "op":
            self._ops = load("rollout")
            self._table = noise_table_handle(noise)
            return
        values = np.zeros(self.num_params) if noise is None else noise.get(0, len(noise))
        with tf.init_scope(), tf.device(device):
            self._table = tf.constant(np.asarray(values, np.float32))

    def plan_tensors(self, plan: GenomePlan) -> tuple[tf.Tensor, ...]:
        """The plan as tensors on the device, in ``materialize``'s argument order (once per
        evaluation)."""
        if self.implementation == "gather":
            plan = self._with_default_rows(plan)
        with tf.device(self.device):
            return tuple(
                tf.constant(a)
                for a in (
                    plan.bases,
                    plan.scales,
                    plan.base_index,
                    plan.term_offsets,
                    plan.term_coef,
                    plan.term_scale,
                    plan.term_noise,
                )
            )

    def materialize(self, plan: tuple[tf.Tensor, ...], genomes: tf.Tensor) -> tf.Tensor:
        """float32 ``[len(genomes), P]`` weights of the listed plan genomes (int32 ids)."""
        with tf.device(self.device):
            if self.implementation == "op":
                return self._ops.neuroevo_materialize(self._table, *plan, genomes)
            with tf.name_scope("materialize"):
                return self._gather_rows(plan, genomes)

    def _with_default_rows(self, plan: GenomePlan) -> GenomePlan:
        """``plan`` with index -1 pointing at an extra row: a zero base, a unit scale (x * 1 is
        x, bit for bit), and a last, dummy term (coefficient 0) that genomes without a term
        read, so the graph gathers without branches."""
        if np.any(np.diff(plan.term_offsets) > 1):
            raise ValueError("the 'gather' materializer takes at most one term per genome")
        params = self.num_params
        return dataclasses.replace(
            plan,
            bases=np.concatenate([plan.bases, np.zeros((1, params), np.float32)]),
            scales=np.concatenate([plan.scales, np.ones((1, params), np.float32)]),
            base_index=np.where(plan.base_index < 0, len(plan.bases), plan.base_index).astype(
                np.int32
            ),
            term_coef=np.append(plan.term_coef, np.float32(0)),
            term_scale=np.append(
                np.where(plan.term_scale < 0, len(plan.scales), plan.term_scale), len(plan.scales)
            ).astype(np.int32),
            term_noise=np.append(plan.term_noise, 0),
        )

    def _gather_rows(self, plan: tuple[tf.Tensor, ...], genomes: tf.Tensor) -> tf.Tensor:
        bases, scales, base_index, offsets, coef, scale_index, noise_index = plan
        first = tf.gather(offsets, genomes)
        has_term = tf.gather(offsets, genomes + 1) > first
        term = tf.where(has_term, first, tf.size(coef, out_type=tf.int64) - 1)
        starts = tf.gather(noise_index, term)
        slices = tf.gather(self._table, starts[:, None] + tf.range(self.num_params, dtype=tf.int64))
        step = (
            tf.gather(coef, term)[:, None]
            * slices
            * tf.gather(scales, tf.gather(scale_index, term))
        )
        base_row = tf.gather(base_index, genomes)
        has_base = base_row < tf.shape(bases, out_type=tf.int32)[0] - 1
        base = tf.gather(bases, base_row)
        # A term alone is the row itself (0 + x would turn -0 into +0).
        summed = tf.where(has_base[:, None], base + step, step)
        return tf.where(has_term[:, None], summed, base)
