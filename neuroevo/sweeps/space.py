"""The search space of a sweep and its trials, every one validated before Ray starts.

``--grid KEY=V1,V2``, ``--uniform KEY=LO,HI`` / ``--loguniform KEY=LO,HI`` with ``--samples N``
and ``--seeds N`` expand into a fixed list of trials, each a mapping of dotted config keys to
values (the overrides of one run). The list is drawn once, from a seeded generator, and saved
with the sweep: a resumed sweep runs exactly the trials it was started with, and every trial's
config is built here, so a typo or an out-of-range value costs one ``error:`` line and no
cluster time.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from neuroevo.config.schema import Config, ConfigError, apply_overrides
from neuroevo.config.yaml import parse_yaml

__all__ = [
    "METRICS",
    "SCHEDULERS",
    "Range",
    "SearchSpace",
    "parse_assignment",
    "parse_range",
    "trial_configs",
]

SCHEDULERS = ("fifo", "asha", "pbt")
"""``fifo``: every trial runs its whole budget; ``asha``: bad trials stop early on the
training curve; ``pbt``: population-based training (exploit a better trial's checkpoint,
explore perturbed hyperparameters)."""

METRICS = ("test_return", "best_return")
"""What a sweep maximises (``neuroevo.sweeps.trial.row_metrics``)."""


def _split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside brackets, so ``[64, 64],[32]`` is two values."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += char in "[{"
        depth -= char in "]}"
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def parse_assignment(text: str, flag: str) -> tuple[str, list[Any]]:
    """``KEY=V1,V2,...`` of ``flag`` as the key and its values, each parsed as YAML (as
    ``--set`` parses one value).

    Raises:
        ConfigError: no ``=``, an empty key or value, or a value that is not YAML.
    """
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise ConfigError(f"{flag} {text!r}: expected KEY=VALUE[,VALUE...]")
    parsed = []
    for part in _split_top_level(values):
        if not part:
            raise ConfigError(f"{flag} {text!r}: an empty value")
        parsed.append(parse_yaml(part, f"{flag} {key}"))
    return key, parsed


@dataclasses.dataclass(frozen=True)
class Range:
    """A continuous hyperparameter: uniform in ``[low, high)``, or in its logarithm (``log``)."""

    low: float
    high: float
    log: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ConfigError(f"expected finite LO < HI, got {self.low:g},{self.high:g}")
        if self.log and self.low <= 0:
            raise ConfigError(f"a log range needs 0 < LO, got {self.low:g}")

    def draw(self, rng: np.random.Generator) -> float:
        if self.log:
            return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return float(rng.uniform(self.low, self.high))


def parse_range(text: str, flag: str) -> tuple[str, Range]:
    """``KEY=LO,HI`` of ``--uniform`` (``flag``) or ``--loguniform`` as the key and its range.

    Raises:
        ConfigError: not two finite numbers with ``LO < HI`` (and ``LO > 0`` for a log range).
    """
    key, values = parse_assignment(text, flag)
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if len(values) != 2 or not numbers or not all(math.isfinite(v) for v in values):
        raise ConfigError(f"{flag} {key}: expected two finite numbers LO,HI, got {values}")
    try:
        return key, Range(float(values[0]), float(values[1]), flag == "--loguniform")
    except ConfigError as err:
        raise ConfigError(f"{flag} {key}: {err}") from None


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """The swept keys and how many trials each point gets.

    Attributes:
        grid: key -> the values every trial combination takes (a Cartesian product).
        ranges: key -> the range each sample draws a value from.
        samples: draws of the ranges, each combined with every grid point (repeats the grid
            when there are no ranges).
        seeds: runs of every configuration, on ``seed``, ``seed + 1``, ... of the base config.
        sample_seed: seeds the draws, so the same command makes the same trials.
    """

    grid: Mapping[str, Sequence[Any]] = dataclasses.field(default_factory=dict)
    ranges: Mapping[str, Range] = dataclasses.field(default_factory=dict)
    samples: int = 1
    seeds: int = 1
    sample_seed: int = 0

    def __post_init__(self) -> None:
        for name in ("samples", "seeds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"--{name} must be a positive integer, got {value!r}")
        both = sorted(set(self.grid) & set(self.ranges))
        if both:
            raise ConfigError(f"{', '.join(both)}: swept by --grid and by a range; keep one")
        if "seed" in self.keys and self.seeds > 1:
            raise ConfigError("seed is swept and --seeds is above 1; keep one")
        for key, values in self.grid.items():
            if not values:
                raise ConfigError(f"--grid {key}: no values")

    @property
    def keys(self) -> list[str]:
        """The swept keys, grid first."""
        return [*self.grid, *self.ranges]

    def trials(self, base_seed: int) -> list[dict[str, Any]]:
        """Every trial's overrides, in a fixed order: grid point, then sample, then seed."""
        rng = np.random.default_rng(self.sample_seed)
        draws = [{k: r.draw(rng) for k, r in self.ranges.items()} for _ in range(self.samples)]
        trials = []
        for point in itertools.product(*self.grid.values()):
            for draw in draws:
                for offset in range(self.seeds):
                    seed = {} if "seed" in self.keys else {"seed": base_seed + offset}
                    trials.append({**dict(zip(self.grid, point, strict=True)), **draw, **seed})
        return trials


def trial_configs(base: Config, trials: Sequence[Mapping[str, Any]]) -> list[Config]:
    """The config of every trial, validated against the schema.

    Raises:
        ConfigError: a trial's overrides name an unknown key or an invalid value; the message
            names the trial and its values.
    """
    configs = []
    for index, overrides in enumerate(trials):
        try:
            configs.append(apply_overrides(base, dict(overrides)))
        except ConfigError as err:
            shown = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
            raise ConfigError(f"trial {index} ({shown}): {err}") from None
    return configs


def check_ranges(base: Config, ranges: Mapping[str, Range]) -> None:
    """Both ends of every range must be valid values of their key (PBT may resample anywhere
    in a range, not only at the trials' own draws).

    Raises:
        ConfigError: naming the key and the end that is refused.
    """
    for key, value in ((k, v) for k, r in ranges.items() for v in (r.low, r.high)):
        try:
            apply_overrides(base, {key: value})
        except ConfigError as err:
            raise ConfigError(f"range of {key}: {err}") from None
