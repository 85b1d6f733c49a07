"""Compact genomes and their materialisation into flat float32 weight vectors.

A genome is a few integers that point into the shared :class:`~neuroevo.genomes.noise.NoiseTable`,
so workers exchange genomes, never weights (Such et al. 2017, Salimans et al. 2017):

- :class:`GAGenome` is a seed chain: ``theta = scales * eps[init] + sum_k sigma_k * eps[i_k]``
  where ``eps[i]`` is the table slice ``noise.get(i, P)`` and ``scales`` is the model's
  per-parameter initialisation std (0 for biases). Mutations are applied in chain order.
- :class:`ESGenome` is a mirrored perturbation of a registered centre, optionally scaled per
  parameter by a registered scale vector:
  ``theta = center[center_id] + (sign * sigma) * scale[scale_id] * eps[noise_index]``
  (``scale[-1]`` is all ones; ``sign == 0`` is the centre itself). Centres and scale vectors
  are *registered vectors*, kept by the decoder under ids of one id space
  (:meth:`GenomeDecoder.set_center`) and shipped to remote nodes once per generation.

Every genome therefore decodes as "a base vector + sum of coefficient x (optional per-parameter
scale vector) x noise slice", evaluated in float32 in this order: ``eps * (sign * sigma)``, then
``* scale``, then ``+ center`` (GA chains: ``scales * eps[init]``, then each ``+= sigma * eps``).
Which strategy uses which form:

- GA, random search, GA-NS: seed chains (base ``scales * eps[init]``, one term per mutation).
- ES, NS-ES family: centre + ``sigma * eps`` (no scale vector).
- PGPE, SNES, CEM, sep-CMA-ES: centre + ``sign * 1.0 * std * eps``, the per-parameter std
  registered as a scale vector beside its centre (kilobytes per genome on the wire).
- Full CMA-ES, xNES, MAP-Elites: a sample is not a per-parameter scaling of one noise slice
  (``m + sigma * B D z``; an elite mixed with another by iso-line variation), so each sample's
  dense base vector is registered and the genome is that vector itself (``sign == 0``) or it
  plus ``sigma * eps``: these ship one float32 [P] vector per genome per generation.

Where weights are built: :class:`GenomeDecoder` materialises on the host with numpy, in
float32. On a CPU this costs one multiply-add per parameter and the copy into the model's
variable is a single memcpy; a device-side path (a device copy of the table, decoding on the
accelerator) would avoid the host->device weight copy on a GPU and is future work.

A GA child is its parent plus one noise slice, so the decoder keeps a bounded LRU cache of
*parents* (proper chain prefixes) and builds a child with one multiply-add. Replaying a chain
and going through the cache perform the same float32 operations in the same order, so both
give bit-identical weights.

Genomes convert to plain Python (:func:`genome_to_dict`) and to flat numpy arrays
(:func:`pack_genomes`) for YAML and ``.npz`` checkpoints; nothing is pickled.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from neuroevo.genomes.noise import NoiseTable

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "ESGenome",
    "GAGenome",
    "Genome",
    "GenomeDecoder",
    "genome_from_dict",
    "genome_to_dict",
    "pack_genomes",
    "unpack_genomes",
]

DEFAULT_CACHE_BYTES = 1 << 30
"""Default parent-cache budget: 1 GiB, room for the paper's 20 parents of a 4M-parameter net
plus the previous generation's."""


@dataclass(frozen=True, slots=True)
class GAGenome:
    """A GA individual as a seed chain (Such et al. 2017).

    Attributes:
        init_index: Noise index of the initial weights ``scales * eps[init_index]``.
        mutations: ``(noise_index, sigma)`` pairs, oldest first; each adds
            ``sigma * eps[noise_index]``.
    """

    init_index: int
    mutations: tuple[tuple[int, float], ...] = ()

    def child(self, noise_index: int, sigma: float) -> GAGenome:
        """Returns this genome with one more mutation appended."""
        return GAGenome(self.init_index, (*self.mutations, (int(noise_index), float(sigma))))

    @property
    def parent(self) -> GAGenome | None:
        """The genome without its last mutation, or ``None`` for an initial genome."""
        return GAGenome(self.init_index, self.mutations[:-1]) if self.mutations else None


@dataclass(frozen=True, slots=True)
class ESGenome:
    """An ES individual: a perturbation of a centre (Salimans et al. 2017).

    Attributes:
        center_id: Id under which the centre was registered with
            :meth:`GenomeDecoder.set_center` (the ES uses its generation number).
        noise_index: Start of the perturbation slice in the noise table.
        sign: +1 or -1 for the mirrored pair, 0 for the centre itself.
        sigma: Perturbation std (a coefficient of the noise slice).
        scale_id: Id of a registered per-parameter scale vector multiplying the noise slice,
            or -1 for none (all ones).
    """

    center_id: int
    noise_index: int
    sign: int
    sigma: float
    scale_id: int = -1

    @property
    def vector_ids(self) -> tuple[int, ...]:
        """Ids of the registered vectors this genome needs (centre, and scale if any)."""
        return (self.center_id,) if self.scale_id < 0 else (self.center_id, self.scale_id)


Genome: TypeAlias = GAGenome | ESGenome


class GenomeDecoder:
    """Turns genomes into flat float32 weight vectors; what the evaluator calls.

    Thread-safe: evaluation threads may share one decoder. Cache bookkeeping is locked, the
    arithmetic is not (two threads may at worst both build the same parent).

    Args:
        noise: The shared noise table.
        scales: float32 [P], per-parameter initialisation std (0 for biases).
        cache_size: Parent-cache budget in bytes (LRU); 0 disables the cache, so every
            decode replays the whole chain.

    Raises:
        ValueError: If ``scales`` is not a finite, non-negative vector, the noise table holds
            fewer than P values, or ``cache_size`` is negative.
    """

    def __init__(
        self, noise: NoiseTable, scales: np.ndarray, cache_size: int = DEFAULT_CACHE_BYTES
    ) -> None:
        scales = np.array(scales, dtype=np.float32)
        if scales.ndim != 1 or scales.size == 0:
            raise ValueError(
                f"scales must be a non-empty 1-D vector (one std per parameter), got shape "
                f"{scales.shape}"
            )
        if not np.all(np.isfinite(scales)) or np.any(scales < 0):
            raise ValueError("scales must be finite and >= 0 (initialisation stds)")
        if len(noise) < scales.size:
            raise ValueError(
                f"noise table of size {len(noise)} is smaller than one parameter vector "
                f"({scales.size} values); create the NoiseTable with size >= {scales.size}"
            )
        if cache_size < 0:
            raise ValueError(f"cache_size must be >= 0 bytes, got {cache_size}")
        scales.flags.writeable = False
        self._noise = noise
        self._scales = scales
        self._capacity = cache_size // (4 * scales.size)
        self._cache: OrderedDict[GAGenome, np.ndarray] = OrderedDict()
        self._centers: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def num_params(self) -> int:
        """P, the length of every decoded vector."""
        return self._scales.size

    @property
    def scales(self) -> np.ndarray:
        """float32 [P], read-only per-parameter initialisation std."""
        return self._scales

    @property
    def cached_parents(self) -> int:
        """Number of parent vectors currently held in the cache."""
        return len(self._cache)

    @property
    def noise(self) -> NoiseTable:
        """The noise table genomes point into."""
        return self._noise

    def set_center(self, center_id: int, vector: np.ndarray, keep: int = 2) -> None:
        """Registers a vector (an ES centre or a per-parameter scale vector) so that
        :class:`ESGenome` naming ``center_id`` as centre or scale can be decoded.

        Args:
            center_id: Id the genomes refer to (centres and scales share one id space).
            vector: float32 [P]; copied.
            keep: How many most recent centres stay registered (older ones are dropped).
        """
        vector = np.array(vector, dtype=np.float32)
        if vector.shape != self._scales.shape:
            raise ValueError(f"centre must have shape {self._scales.shape}, got {vector.shape}")
        vector.flags.writeable = False
        with self._lock:
            self._centers[int(center_id)] = vector
            self._centers.move_to_end(int(center_id))
            while len(self._centers) > keep:
                self._centers.popitem(last=False)

    def center(self, center_id: int) -> np.ndarray:
        """The read-only float32 [P] centre registered as ``center_id``.

        Raises:
            ValueError: If no centre of that id is registered.
        """
        with self._lock:
            center = self._centers.get(int(center_id))
        if center is None:
            raise ValueError(
                f"ES centre {center_id} is not registered (known: {list(self._centers)}); "
                "call set_center() first"
            )
        return center

    def decode(self, genome: Genome, out: np.ndarray | None = None) -> np.ndarray:
        """Materialises one genome.

        Args:
            genome: A :class:`GAGenome` or :class:`ESGenome`.
            out: Optional float32 [P] buffer to write into (e.g. a row of a batch).

        Returns:
            float32 [P] weights (``out`` if given), owned by the caller.

        Raises:
            ValueError: For an unregistered ES centre or an out-of-table noise index.
            TypeError: For anything that is not a genome.
        """
        if out is None:
            out = np.empty(self.num_params, dtype=np.float32)
        if isinstance(genome, ESGenome):
            self._decode_es(genome, out)
        elif isinstance(genome, GAGenome):
            cached, parent = self._lookup(genome), genome.parent
            if cached is not None:
                np.copyto(out, cached)
            elif parent is None:
                np.multiply(self._scales, self._noise.get(genome.init_index, out.size), out=out)
            else:
                np.copyto(out, self._parent_vector(parent))
                self._mutate(out, genome.mutations[-1])
        else:
            raise TypeError(f"expected a GAGenome or ESGenome, got {type(genome).__name__}")
        return out

    def decode_batch(self, genomes: Sequence[Genome]) -> np.ndarray:
        """Materialises several genomes.

        Returns:
            float32 [k, P], row ``i`` holding ``genomes[i]``.
        """
        batch = np.empty((len(genomes), self.num_params), dtype=np.float32)
        for row, genome in zip(batch, genomes, strict=True):
            self.decode(genome, out=row)
        return batch

    def _decode_es(self, genome: ESGenome, out: np.ndarray) -> None:
        center = self.center(genome.center_id)
        if genome.sign == 0:
            np.copyto(out, center)
            return
        eps = self._noise.get(genome.noise_index, out.size)
        np.multiply(eps, np.float32(genome.sign * genome.sigma), out=out)
        if genome.scale_id >= 0:
            np.multiply(out, self.center(genome.scale_id), out=out)
        np.add(out, center, out=out)

    def _mutate(self, vector: np.ndarray, mutation: tuple[int, float]) -> None:
        """vector += sigma * eps[index], the one float32 step shared by replay and cache."""
        index, sigma = mutation
        vector += np.float32(sigma) * self._noise.get(index, vector.size)

    def _lookup(self, genome: GAGenome) -> np.ndarray | None:
        with self._lock:
            vector = self._cache.get(genome)
            if vector is not None:
                self._cache.move_to_end(genome)
            return vector

    def _parent_vector(self, parent: GAGenome) -> np.ndarray:
        """Returns the parent's weights (read-only), from the cache or built and cached."""
        cached = self._lookup(parent)
        if cached is not None:
            return cached
        vector, start = None, len(parent.mutations)
        while vector is None and start > 0:  # Longest cached prefix of the parent's chain.
            start -= 1
            vector = self._lookup(GAGenome(parent.init_index, parent.mutations[:start]))
        if vector is None:  # Nothing cached: replay the whole chain (start is 0 here).
            vector = self._scales * self._noise.get(parent.init_index, self.num_params)
        else:
            vector = vector.copy()
        for mutation in parent.mutations[start:]:
            self._mutate(vector, mutation)
        vector.flags.writeable = False
        with self._lock:
            if self._capacity > 0:
                self._cache[parent] = vector
                while len(self._cache) > self._capacity:
                    self._cache.popitem(last=False)
        return vector


def genome_to_dict(genome: Genome) -> dict[str, Any]:
    """Returns a genome as plain Python (for YAML), inverted by :func:`genome_from_dict`."""
    if isinstance(genome, GAGenome):
        mutations = [[index, sigma] for index, sigma in genome.mutations]
        return {"kind": "ga", "init_index": genome.init_index, "mutations": mutations}
    if isinstance(genome, ESGenome):
        return {
            "kind": "es",
            "center_id": genome.center_id,
            "noise_index": genome.noise_index,
            "sign": genome.sign,
            "sigma": genome.sigma,
            "scale_id": genome.scale_id,
        }
    raise TypeError(f"expected a GAGenome or ESGenome, got {type(genome).__name__}")


def genome_from_dict(data: Mapping[str, Any]) -> Genome:
    """Rebuilds a genome from :func:`genome_to_dict` output.

    Raises:
        ValueError: If ``data["kind"]`` is not "ga" or "es".
    """
    if data["kind"] == "ga":
        mutations = tuple((int(index), float(sigma)) for index, sigma in data["mutations"])
        return GAGenome(int(data["init_index"]), mutations)
    if data["kind"] == "es":
        return ESGenome(
            int(data["center_id"]),
            int(data["noise_index"]),
            int(data["sign"]),
            float(data["sigma"]),
            int(data.get("scale_id", -1)),
        )
    raise ValueError(f"unknown genome kind {data['kind']!r}; expected 'ga' or 'es'")


def pack_genomes(genomes: Sequence[Genome]) -> dict[str, np.ndarray]:
    """Packs genomes of one kind into flat arrays (for ``.npz``), exact for every field.

    GA chains are ragged, so their mutations are concatenated and ``chain_length`` says how
    many belong to each genome.

    Returns:
        GA: ``init_index`` int64 [n], ``chain_length`` int64 [n], ``mutation_index`` int64
        [sum of lengths], ``mutation_sigma`` float64 [same]. ES: ``center_id``,
        ``noise_index``, ``sign``, ``scale_id`` int64 [n] and ``sigma`` float64 [n]. Both also carry
        ``kind``, a 0-d string array.

    Raises:
        TypeError: If the genomes are not all of one kind.
    """
    if all(isinstance(genome, GAGenome) for genome in genomes):
        flat = [mutation for genome in genomes for mutation in genome.mutations]
        return {
            "kind": np.array("ga"),
            "init_index": np.array([g.init_index for g in genomes], dtype=np.int64),
            "chain_length": np.array([len(g.mutations) for g in genomes], dtype=np.int64),
            "mutation_index": np.array([m[0] for m in flat], dtype=np.int64),
            "mutation_sigma": np.array([m[1] for m in flat], dtype=np.float64),
        }
    if all(isinstance(genome, ESGenome) for genome in genomes):
        return {
            "kind": np.array("es"),
            "center_id": np.array([g.center_id for g in genomes], dtype=np.int64),
            "noise_index": np.array([g.noise_index for g in genomes], dtype=np.int64),
            "sign": np.array([g.sign for g in genomes], dtype=np.int64),
            "sigma": np.array([g.sigma for g in genomes], dtype=np.float64),
            "scale_id": np.array([g.scale_id for g in genomes], dtype=np.int64),
        }
    raise TypeError("pack_genomes needs genomes of one kind (all GAGenome or all ESGenome)")


def unpack_genomes(arrays: Mapping[str, np.ndarray]) -> tuple[Genome, ...]:
    """Inverts :func:`pack_genomes`.

    Raises:
        ValueError: If ``arrays["kind"]`` is not "ga" or "es", or the arrays do not fit
            together (columns of different lengths, chains longer than the mutations).
    """
    kind = str(arrays["kind"])
    if kind == "ga":
        lengths = np.asarray(arrays["chain_length"])
        indices = arrays["mutation_index"].tolist()
        sigmas = arrays["mutation_sigma"].tolist()
        if (
            lengths.ndim != 1
            or np.asarray(arrays["init_index"]).shape != lengths.shape
            or (lengths < 0).any()
            or int(lengths.sum()) != len(indices)
            or len(sigmas) != len(indices)
        ):
            raise ValueError(
                f"GA genomes do not fit together: {np.asarray(arrays['init_index']).size} "
                f"init indices, chain lengths summing to {int(lengths.sum())}, "
                f"{len(indices)} mutation indices and {len(sigmas)} sigmas"
            )
        genomes, start = [], 0
        for init, length in zip(
            arrays["init_index"].tolist(), arrays["chain_length"].tolist(), strict=True
        ):
            chain = zip(
                indices[start : start + length], sigmas[start : start + length], strict=True
            )
            genomes.append(GAGenome(init, tuple(chain)))
            start += length
        return tuple(genomes)
    if kind == "es":
        columns = [arrays[name].tolist() for name in ("center_id", "noise_index", "sign", "sigma")]
        # Checkpoints written before scale vectors existed have no scale_id column.
        columns.append(np.asarray(arrays.get("scale_id", np.full(len(columns[0]), -1))).tolist())
        if np.asarray(arrays["center_id"]).ndim != 1 or len({len(c) for c in columns}) != 1:
            raise ValueError(f"ES genome columns differ in length: {[len(c) for c in columns]}")
        return tuple(ESGenome(*row) for row in zip(*columns, strict=True))
    raise ValueError(f"unknown genome kind {kind!r}; expected 'ga' or 'es'")
