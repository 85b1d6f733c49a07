"""Genomes of Uber's deep-neuroevolution GPU code (Such et al. 2017), replayed in neuroevo.

Uber's ``gpu_implementation`` stores a GA individual as a seed list ``[init_index,
[noise_index, power], ...]`` into its own noise table (``SharedNoiseTable``:
``RandomState(123).randn(250_000_000)`` as float32) and its own parameter layout
(``models/base.py``, ``models/dqn.py``). Decoding one here needs three things, all exact:

- the same table: :func:`uber_noise_table` (``NoiseTable(generator="uber")``, cached once);
- the same chain arithmetic: a seed list is a :class:`~neuroevo.genomes.genome.GAGenome` (same init
  ``scale_by * eps``, same float32 mutation steps), converted by :func:`genome_from_seeds` and
  :func:`seeds_from_genome`;
- the same layout: Uber's variables come in the order of our ``layout`` (``conv1/w``,
  ``conv1/b``, ..., ``out/w``, ``out/b``) with the same init stds (``std / sqrt(fan_in)``,
  output 0.1, biases 0), but its dense kernels are ``[in, out]`` where ours are
  ``[units, in]``. :func:`uber_permutation` maps one flat vector onto the other, so our own
  population models run Uber's networks (``Model`` = ``nature_small``, ``LargeModel`` =
  ``nature_large``; both use SAME padding like Uber's ``extract_image_patches`` convolutions).

Observations must come from the Atari op with ``preprocessing: uber`` (float32, Uber's
palette, max-pool, aligned-corner bilinear resize, zero-started stack).
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from neuroevo.genomes.genome import GAGenome, GenomeDecoder
from neuroevo.genomes.noise import NoiseTable

if TYPE_CHECKING:  # TensorFlow only where a model is used, so the CLIs parse arguments first
    from neuroevo.models.sequential import SequentialModel

__all__ = [
    "FROSTBITE_ELITE",
    "UBER_MODELS",
    "UBER_NOISE_SEED",
    "UBER_NOISE_SIZE",
    "UberGenome",
    "UberGenomeDecoder",
    "genome_from_seeds",
    "load_uber_genome",
    "parse_seeds",
    "seeds_from_genome",
    "uber_noise_table",
    "uber_permutation",
]

UBER_NOISE_SEED = 123
UBER_NOISE_SIZE = 250_000_000
"""Uber's ``SharedNoiseTable``: seed 123, 250M float32 values (1 GB)."""

LEGACY_MUTATION_POWER = 0.005
"""Power of a mutation stored as a bare index (Uber's ``copy_population`` back-compatibility)."""

UBER_MODELS = {"LargeModel": "nature_large", "Model": "nature_small"}
"""Uber's model classes (``neuroevolution/models/dqn.py``) and the neuroevo model of each."""

FROSTBITE_ELITE = Path(__file__).with_name("data") / "frostbite_elite.json"
"""Uber's published Frostbite deep-GA elite (``display.py``), with attribution and licence."""


@dataclass(frozen=True)
class UberGenome:
    """A seed list read from a file, with what the file says about it.

    Attributes:
        genome: The seed chain as a neuroevo genome.
        game: ale-py game id the file names (``"game"`` key), or None.
        model: neuroevo model name for the file's Uber model (``"model"`` key), or None.
    """

    genome: GAGenome
    game: str | None = None
    model: str | None = None


def uber_noise_table(
    size: int | None = None, cache_dir: str | os.PathLike[str] | None = None
) -> NoiseTable:
    """Uber's noise table (generated once per machine into the noise cache, ~1 GB).

    Args:
        size: values to draw; None is :data:`UBER_NOISE_SIZE`. Tests use a small prefix (the
            table of a smaller size is a prefix of the full one).
        cache_dir: as for :class:`~neuroevo.genomes.noise.NoiseTable`.
    """
    size = UBER_NOISE_SIZE if size is None else size
    return NoiseTable(UBER_NOISE_SEED, size, cache_dir, num_threads=1, generator="uber")


def _index(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where} must be a non-negative integer noise index, got {value!r}")
    return value


def genome_from_seeds(seeds: Sequence[Any]) -> GAGenome:
    """An Uber seed list ``[init, [index, power], ...]`` as a :class:`GAGenome`.

    A mutation given as a bare index has power 0.005, as in Uber's back-compatibility code.

    Raises:
        ValueError: Not a non-empty list of that form (the message names the bad entry).
    """
    if isinstance(seeds, str | bytes) or not isinstance(seeds, Sequence) or not seeds:
        raise ValueError(
            "an Uber seed list must be a non-empty list [init_index, [index, power], ...], "
            f"got {type(seeds).__name__}"
        )
    init = _index(seeds[0], "seeds[0]")
    mutations = []
    for position, entry in enumerate(seeds[1:], start=1):
        where = f"seeds[{position}]"
        if isinstance(entry, int) and not isinstance(entry, bool):
            mutations.append((_index(entry, where), LEGACY_MUTATION_POWER))
            continue
        if isinstance(entry, str | bytes) or not isinstance(entry, Sequence) or len(entry) != 2:
            raise ValueError(f"{where} must be [noise_index, power], got {entry!r}")
        index, power = entry
        if isinstance(power, bool) or not isinstance(power, int | float) or not np.isfinite(power):
            raise ValueError(f"{where}: the mutation power must be a finite number, got {power!r}")
        mutations.append((_index(index, f"{where}[0]"), float(power)))
    return GAGenome(init, tuple(mutations))


def seeds_from_genome(genome: GAGenome) -> list[Any]:
    """The Uber seed list of a GA genome (inverse of :func:`genome_from_seeds`)."""
    if not isinstance(genome, GAGenome):
        raise TypeError(f"only GA genomes are Uber seed lists, got {type(genome).__name__}")
    return [genome.init_index, *([index, power] for index, power in genome.mutations)]


def parse_seeds(text: str, source: str = "<string>") -> UberGenome:
    """Reads a seed list from JSON or a Python literal (``seeds = [...]`` also accepted), or a
    JSON object with ``"seeds"`` and optional ``"game"`` / ``"model"`` (Uber class name).

    Raises:
        ValueError: Unparseable text or a malformed seed list (the message names ``source``).
    """
    body = text.strip()
    if body.startswith("seeds") and "=" in body:
        body = body.split("=", 1)[1].strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        try:
            data = ast.literal_eval(body)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise ValueError(
                f"{source} is neither JSON nor a Python literal seed list "
                f"([init_index, [index, power], ...]): {exc}"
            ) from None
    game = model = None
    if isinstance(data, dict):
        if "seeds" not in data:
            raise ValueError(f"{source}: a JSON object needs a 'seeds' key, got {sorted(data)}")
        game = data.get("game")
        uber_model = data.get("model")
        if uber_model is not None:
            if uber_model not in UBER_MODELS:
                raise ValueError(
                    f"{source}: model {uber_model!r} is not one of Uber's "
                    f"{', '.join(map(repr, UBER_MODELS))}"
                )
            model = UBER_MODELS[uber_model]
        data = data["seeds"]
    try:
        return UberGenome(genome_from_seeds(data), game, model)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def load_uber_genome(path: str | os.PathLike[str]) -> UberGenome:
    """Reads a seed-list file (see :func:`parse_seeds`).

    Raises:
        FileNotFoundError: No such file.
        ValueError: Not a seed list.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Uber genome file {path} not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a text file holding a seed list") from None
    return parse_seeds(text, str(path))


def uber_permutation(model: SequentialModel) -> np.ndarray:
    """int64 ``[P]`` with ``ours = uber[perm]``: Uber's flat layout onto ``model``'s.

    Uber's variables come in our layout order; only dense kernels differ (``[in, out]``
    there, ``[units, in]`` here), so their blocks are transposed.

    Raises:
        ValueError: The model has a layer Uber's networks do not (only SAME convolutions,
            flatten and dense layers map).
    """
    from neuroevo.models.layers import Conv2D, Dense, Flatten

    parts, offset = [], 0
    for layer in model.layers:
        if isinstance(layer, Conv2D) and layer.padding != "SAME":
            raise ValueError(f"Uber's convolutions use SAME padding; {layer.name!r} is VALID")
        if not isinstance(layer, Conv2D | Dense | Flatten):
            raise ValueError(
                f"layer {layer.name!r} ({type(layer).__name__}) has no Uber counterpart"
            )
        for spec in layer.layout:
            block = np.arange(offset, offset + spec.size, dtype=np.int64)
            if isinstance(layer, Dense) and spec.name.endswith("kernel"):
                units, fan_in = spec.shape
                block = block.reshape(fan_in, units).T.reshape(-1)
            parts.append(block)
            offset += spec.size
    if offset != model.num_params:
        raise ValueError(f"layers hold {offset} parameters but the model has {model.num_params}")
    return np.concatenate(parts)


class UberGenomeDecoder:
    """Decodes Uber seed lists into flat weights in ``model``'s layout.

    A :class:`~neuroevo.genomes.genome.GenomeDecoder` over Uber's table and scales does the chain
    arithmetic in Uber's layout (bit for bit Uber's ``compute_weights_from_seeds``); the result
    is permuted into ours.

    Args:
        model: A ``nature_large`` / ``nature_small`` model (any SAME-conv / dense stack).
        noise: Uber's table (:func:`uber_noise_table`).
    """

    def __init__(self, model: SequentialModel, noise: NoiseTable) -> None:
        if noise.generator != "uber" or noise.seed != UBER_NOISE_SEED:
            raise ValueError(f"Uber genomes index Uber's table (uber_noise_table()), not {noise}")
        self._perm = uber_permutation(model)
        uber_scales = np.empty(model.num_params, np.float32)
        uber_scales[self._perm] = model.init_scales()
        self._decoder = GenomeDecoder(noise, uber_scales, cache_size=0)

    def decode_uber_layout(self, genome: GAGenome) -> np.ndarray:
        """float32 ``[P]``: the weights as Uber's ``compute_weights_from_seeds`` returns them."""
        return self._decoder.decode(genome)

    def decode(self, genome: GAGenome) -> np.ndarray:
        """float32 ``[P]``: the weights in the model's layout, ready for ``model.load``."""
        return self.decode_uber_layout(genome)[self._perm]
