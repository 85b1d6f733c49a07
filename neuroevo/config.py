"""Typed configuration of a training run: schema, YAML loading, ``key.path=value`` overrides.

Every setting of ``python -m neuroevo.train`` lives in one tree of frozen dataclasses rooted at
:class:`Config`, so a run's behaviour is fully described by a value that can be compared,
saved next to the run and diffed on resume. Settings come from a YAML file plus ``--set``
overrides; both are merged into one mapping and validated once, so an override can repair a
value the file alone would make invalid (e.g. lower ``truncation`` together with
``population``).

Validation happens when a section is constructed (``__post_init__``), whether it comes from
YAML or from Python code: types are checked and normalised (lists become tuples, strings become
enums, integers become floats where a float is expected), then ranges and relations between
fields are checked. Every failure is a :class:`ConfigError` whose message names the full key,
the offending value and what is allowed. Modes are enums or nested sections, never strings with
an embedded syntax.

The reference of every key is ``docs/CONFIG.md``; a test keeps it in sync with this module.
This module must not import TensorFlow: it is loaded by every entry point before anything
heavy.
"""

import dataclasses
import difflib
import math
import os
import re
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Any, get_args, get_origin

import yaml

ATARI_MAX_EPISODE_FRAMES = 108_000
"""Default per-episode cutoff for Atari in emulator frames (30 minutes at 60 Hz)."""

MUJOCO_MAX_EPISODE_STEPS = 1000
"""Default per-episode cutoff for MuJoCo tasks in agent steps (gymnasium's TimeLimit)."""

# Settings that may change when a run is resumed: they decide when to stop, what to log and
# how fast evaluation runs, never which genomes are produced or how they score.
_RESUME_SAFE_KEYS = ("budget", "logging", "evaluator", "noise.cache_dir")


class ConfigError(ValueError):
    """An invalid config file, key or value; the message names the key and what is allowed.

    Attributes:
        problem: What is wrong, without the key.
        key: Dotted path of the offending key, or None when the problem is not about one key.
    """

    def __init__(self, problem: str, key: str | None = None) -> None:
        self.problem = problem
        self.key = key
        super().__init__(f"{key}: {problem}" if key else problem)

    def within(self, section: str) -> "ConfigError":
        """Returns this error with its key prefixed by ``section``.

        Sections validate their own fields without knowing where they sit in the tree; the
        loader adds the path on the way out so messages show the full key.
        """
        return ConfigError(self.problem, f"{section}.{self.key}" if self.key else section)


class _Choice(str, Enum):
    """Base of the config's enums: compares equal to, and prints as, its YAML spelling."""

    def __str__(self) -> str:
        return self.value


class AlgorithmName(_Choice):
    """Which optimizer trains the population."""

    GA = "ga"
    ES = "es"
    RANDOM_SEARCH = "random_search"


class ScheduleKind(_Choice):
    """How the GA's mutation power moves from its initial to its final value."""

    CONSTANT = "constant"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


class FitnessShaping(_Choice):
    """How ES turns episode returns into weights for the gradient estimate."""

    CENTERED_RANK = "centered_rank"
    STANDARDIZE = "standardize"
    IDENTITY = "identity"


class EnvKind(_Choice):
    """Which environment backend runs the episodes."""

    ATARI = "atari"
    MUJOCO = "mujoco"
    GYM = "gym"


class ModelName(_Choice):
    """Which policy network is evaluated."""

    NATURE_LARGE = "nature_large"
    NATURE_SMALL = "nature_small"
    MLP = "mlp"


class Activation(_Choice):
    """Hidden-layer nonlinearity of the MLP."""

    TANH = "tanh"
    RELU = "relu"
    ELU = "elu"


class OutputKind(_Choice):
    """How network outputs become actions."""

    ARGMAX = "argmax"
    TANH = "tanh"
    CLIP = "clip"


class DType(_Choice):
    """Floating-point type of the network computation."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"


def _show(value: Any) -> str:
    """Formats a value for an error message so its YAML spelling and type are visible."""
    if value is None:
        return "null"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return f"'{value}'"
    return f"{value!r} ({type(value).__name__})"


def _require(ok: bool, key: str, value: Any, rule: str) -> None:
    """Raises a ConfigError saying that ``key``'s ``value`` must be ``rule`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{_show(value)} must be {rule}", key)


def _require_positive_or_null(section: Any, *names: str) -> None:
    """Checks that each named optional numeric field is either null or > 0."""
    for name in names:
        value = getattr(section, name)
        _require(value is None or value > 0, name, value, "> 0 or null")


def _to_bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"expected true or false, got {_show(value)}", key)
    return value


def _to_int(value: Any, key: str) -> int:
    # YAML writes 1e9 as a float; accept it when it is integral so budgets read naturally.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"expected an integer, got {_show(value)}", key)
    return value


def _to_float(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"expected a number, got {_show(value)}", key)
    if not math.isfinite(value):
        raise ConfigError(f"{_show(value)} must be a finite number", key)
    return float(value)


def _to_str(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"expected a string, got {_show(value)}", key)
    return value


def _to_enum(value: Any, enum_type: type[Enum], key: str) -> Enum:
    allowed = [member.value for member in enum_type]
    if value not in allowed:
        close = difflib.get_close_matches(str(value), allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        choices = ", ".join(f"'{a}'" for a in allowed)
        raise ConfigError(f"{_show(value)} is not one of {choices}{hint}", key)
    return enum_type(value)


_SCALARS = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str}


def _convert(value: Any, hint: Any, key: str) -> Any:
    """Checks ``value`` against the field type ``hint`` and returns it in canonical form.

    The schema uses only: bool, int, float, str, _Choice enums, sections (dataclasses),
    ``tuple[X, ...]`` and ``X | None`` of those.
    """
    if isinstance(hint, UnionType):
        (inner,) = [arg for arg in get_args(hint) if arg is not type(None)]
        return None if value is None else _convert(value, inner, key)
    if value is None:
        raise ConfigError("must not be null", key)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, hint):
            raise ConfigError(f"expected a section of keys, got {_show(value)}", key)
        return value
    if get_origin(hint) is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"expected a list, got {_show(value)}", key)
        item_type = get_args(hint)[0]
        return tuple(_convert(item, item_type, f"{key}[{i}]") for i, item in enumerate(value))
    if issubclass(hint, Enum):
        return _to_enum(value, hint, key)
    return _SCALARS[hint](value, key)


@dataclasses.dataclass(frozen=True)
class _Section:
    """Base of every config section: type normalisation, then the section's own checks."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = _convert(getattr(self, field.name), field.type, field.name)
            object.__setattr__(self, field.name, value)
        self._validate()

    def _validate(self) -> None:
        """Checks ranges and relations between fields; types are already normalised."""


@dataclasses.dataclass(frozen=True)
class MutationScheduleConfig(_Section):
    """How the GA's mutation power changes over generations.

    ``linear`` moves it in equal steps, ``exponential`` by a constant factor per generation
    (``(final_power / mutation_power) ** (1 / generations)``), from ``mutation_power`` at
    generation 0 to ``final_power`` at ``generations``, and holds it there afterwards.
    ``constant`` ignores both fields (the papers' setting). These are the semantics of
    :class:`neuroevo.algorithms.ga.SigmaSchedule`, which the training CLI builds from this.
    """

    kind: ScheduleKind = ScheduleKind.CONSTANT
    final_power: float = 0.0002
    generations: int = 1000

    def _validate(self) -> None:
        _require(self.final_power > 0, "final_power", self.final_power, "> 0")
        _require(self.generations >= 1, "generations", self.generations, ">= 1")


@dataclasses.dataclass(frozen=True)
class GAConfig(_Section):
    """Truncation-selection genetic algorithm (Such et al. 2017, "Deep Neuroevolution").

    Each generation keeps the best ``truncation`` genomes as parents, mutates them with
    Gaussian noise of standard deviation ``mutation_power`` and carries the elite over
    unchanged; the elite is picked by re-evaluating the top ``validation_candidates`` on
    ``validation_episodes`` episodes each.
    """

    population: int = 1000
    truncation: int = 20
    mutation_power: float = 0.002
    mutation_schedule: MutationScheduleConfig = dataclasses.field(
        default_factory=MutationScheduleConfig
    )
    validation_candidates: int = 10
    validation_episodes: int = 30
    episodes_per_genome: int = 1

    def _validate(self) -> None:
        _require(self.population >= 2, "population", self.population, ">= 2")
        _require(self.truncation >= 1, "truncation", self.truncation, ">= 1")
        _require(
            self.truncation <= self.population,
            "truncation",
            self.truncation,
            f"<= population ({self.population})",
        )
        _require(self.mutation_power > 0, "mutation_power", self.mutation_power, "> 0")
        _require(
            1 <= self.validation_candidates <= self.population,
            "validation_candidates",
            self.validation_candidates,
            f"between 1 and population ({self.population})",
        )
        _require(
            self.validation_episodes >= 1, "validation_episodes", self.validation_episodes, ">= 1"
        )
        _require(
            self.episodes_per_genome >= 1, "episodes_per_genome", self.episodes_per_genome, ">= 1"
        )


@dataclasses.dataclass(frozen=True)
class ESConfig(_Section):
    """OpenAI evolution strategies (Salimans et al. 2017) with Adam on the search center.

    ``population`` counts evaluated perturbations; with ``mirrored`` sampling they come in
    +/- pairs, hence an even population.
    """

    population: int = 5000
    sigma: float = 0.02
    learning_rate: float = 0.01
    l2_coeff: float = 0.005
    mirrored: bool = True
    fitness_shaping: FitnessShaping = FitnessShaping.CENTERED_RANK
    eval_center: bool = True
    episodes_per_genome: int = 1

    def _validate(self) -> None:
        _require(self.population >= 2, "population", self.population, ">= 2")
        _require(
            not self.mirrored or self.population % 2 == 0,
            "population",
            self.population,
            "even when mirrored is true (perturbations come in +/- pairs)",
        )
        _require(self.sigma > 0, "sigma", self.sigma, "> 0")
        _require(self.learning_rate > 0, "learning_rate", self.learning_rate, "> 0")
        _require(self.l2_coeff >= 0, "l2_coeff", self.l2_coeff, ">= 0")
        _require(
            self.episodes_per_genome >= 1, "episodes_per_genome", self.episodes_per_genome, ">= 1"
        )


@dataclasses.dataclass(frozen=True)
class RandomSearchConfig(_Section):
    """Pure random search: every generation samples fresh genomes (Such et al. 2017)."""

    population: int = 1000
    validation_candidates: int = 10
    validation_episodes: int = 30
    episodes_per_genome: int = 1

    def _validate(self) -> None:
        _require(self.population >= 1, "population", self.population, ">= 1")
        _require(
            1 <= self.validation_candidates <= self.population,
            "validation_candidates",
            self.validation_candidates,
            f"between 1 and population ({self.population})",
        )
        _require(
            self.validation_episodes >= 1, "validation_episodes", self.validation_episodes, ">= 1"
        )
        _require(
            self.episodes_per_genome >= 1, "episodes_per_genome", self.episodes_per_genome, ">= 1"
        )


@dataclasses.dataclass(frozen=True)
class AlgorithmConfig(_Section):
    """The chosen optimizer plus the settings of every optimizer.

    Only the section named by ``name`` is used, but all are validated so a config stays
    valid when ``name`` is switched by an override.
    """

    name: AlgorithmName = AlgorithmName.GA
    ga: GAConfig = dataclasses.field(default_factory=GAConfig)
    es: ESConfig = dataclasses.field(default_factory=ESConfig)
    random_search: RandomSearchConfig = dataclasses.field(default_factory=RandomSearchConfig)

    @property
    def selected(self) -> GAConfig | ESConfig | RandomSearchConfig:
        """The settings section of the algorithm named by ``name``."""
        sections = {
            AlgorithmName.GA: self.ga,
            AlgorithmName.ES: self.es,
            AlgorithmName.RANDOM_SEARCH: self.random_search,
        }
        return sections[self.name]


@dataclasses.dataclass(frozen=True)
class AtariConfig(_Section):
    """Atari preprocessing (Machado et al. 2018 terms); used when ``env.kind`` is atari."""

    frame_skip: int = 4
    noop_max: int = 30
    sticky_action_prob: float = 0.0
    fire_reset: bool = False
    terminal_on_life_loss: bool = False
    full_action_space: bool = False
    screen_size: int = 84
    stack: int = 4

    def _validate(self) -> None:
        _require(self.frame_skip >= 1, "frame_skip", self.frame_skip, ">= 1")
        _require(self.noop_max >= 0, "noop_max", self.noop_max, ">= 0")
        _require(
            0.0 <= self.sticky_action_prob <= 1.0,
            "sticky_action_prob",
            self.sticky_action_prob,
            "in [0, 1]",
        )
        _require(self.screen_size >= 1, "screen_size", self.screen_size, ">= 1")
        _require(self.stack >= 1, "stack", self.stack, ">= 1")


@dataclasses.dataclass(frozen=True)
class MujocoConfig(_Section):
    """MuJoCo task options; used when ``env.kind`` is mujoco. Null keeps the task default."""

    reset_noise_scale: float | None = None

    def _validate(self) -> None:
        _require(
            self.reset_noise_scale is None or self.reset_noise_scale >= 0,
            "reset_noise_scale",
            self.reset_noise_scale,
            ">= 0 or null",
        )


@dataclasses.dataclass(frozen=True)
class EnvConfig(_Section):
    """Which environment runs the episodes and how.

    ``id`` is only checked to be a non-empty string here; the env registry checks that the
    game, task or gymnasium id exists.
    """

    kind: EnvKind = EnvKind.ATARI
    id: str = "pong"
    max_episode_steps: int | None = None
    atari: AtariConfig = dataclasses.field(default_factory=AtariConfig)
    mujoco: MujocoConfig = dataclasses.field(default_factory=MujocoConfig)

    def _validate(self) -> None:
        _require(bool(self.id.strip()), "id", self.id, "a non-empty name")
        _require_positive_or_null(self, "max_episode_steps")

    @property
    def step_limit(self) -> int | None:
        """Per-episode cutoff in agent steps, with null resolved per env kind.

        Atari counts the cutoff in emulator frames (108,000, i.e. 27,000 agent steps at frame
        skip 4); MuJoCo uses 1000 steps. None means the gymnasium env's own time limit.
        """
        if self.max_episode_steps is not None:
            return self.max_episode_steps
        if self.kind is EnvKind.ATARI:
            return ATARI_MAX_EPISODE_FRAMES // self.atari.frame_skip
        if self.kind is EnvKind.MUJOCO:
            return MUJOCO_MAX_EPISODE_STEPS
        return None


@dataclasses.dataclass(frozen=True)
class MlpConfig(_Section):
    """Fully connected policy; used when ``model.name`` is mlp. No hidden layer = linear."""

    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: Activation = Activation.TANH

    def _validate(self) -> None:
        for i, size in enumerate(self.hidden_sizes):
            _require(size >= 1, f"hidden_sizes[{i}]", size, ">= 1")


@dataclasses.dataclass(frozen=True)
class ModelConfig(_Section):
    """Policy network. ``output`` null picks argmax for discrete, tanh for continuous actions."""

    name: ModelName = ModelName.NATURE_LARGE
    mlp: MlpConfig = dataclasses.field(default_factory=MlpConfig)
    output: OutputKind | None = None
    dtype: DType = DType.FLOAT32
    virtual_batch_norm: bool = False
    observation_normalization: bool = False
    obs_stats_fraction: float = 0.01

    def _validate(self) -> None:
        _require(
            0 < self.obs_stats_fraction <= 1,
            "obs_stats_fraction",
            self.obs_stats_fraction,
            "in (0, 1]",
        )
        _require(
            not self.observation_normalization or self.name is ModelName.MLP,
            "observation_normalization",
            True,
            "false unless model.name is mlp (only vector observations are normalised)",
        )


@dataclasses.dataclass(frozen=True)
class EvaluatorConfig(_Section):
    """How evaluation is spread over workers and devices; null means chosen automatically."""

    workers: int | None = None
    slots_per_worker: int | None = None
    device: str | None = None
    simulated_latency_ms: float = 0.0

    def _validate(self) -> None:
        _require_positive_or_null(self, "workers", "slots_per_worker")
        _require(
            self.device is None or bool(self.device.strip()),
            "device",
            self.device,
            "a TensorFlow device string such as '/GPU:0', or null",
        )
        _require(
            self.simulated_latency_ms >= 0,
            "simulated_latency_ms",
            self.simulated_latency_ms,
            ">= 0",
        )


@dataclasses.dataclass(frozen=True)
class NoiseConfig(_Section):
    """Shared Gaussian noise table from which every mutation and perturbation is sliced."""

    seed: int = 123
    size: int = 250_000_000
    cache_dir: str | None = None

    def _validate(self) -> None:
        _require(self.seed >= 0, "seed", self.seed, ">= 0")
        _require(self.size > 0, "size", self.size, "> 0")


@dataclasses.dataclass(frozen=True)
class BudgetConfig(_Section):
    """When training stops: at the first limit reached. At least one limit is required."""

    generations: int | None = None
    frames: int | None = None
    hours: float | None = None

    def _validate(self) -> None:
        if self.generations is None and self.frames is None and self.hours is None:
            raise ConfigError("set at least one of generations, frames or hours (all are null)")
        _require_positive_or_null(self, "generations", "frames", "hours")


@dataclasses.dataclass(frozen=True)
class LoggingConfig(_Section):
    """What the run directory records and how often."""

    checkpoint_every_generations: int | None = 1
    checkpoint_every_minutes: float | None = None
    keep_checkpoints: int = 3
    tensorboard: bool = True
    progress: bool = True

    def _validate(self) -> None:
        _require_positive_or_null(self, "checkpoint_every_generations", "checkpoint_every_minutes")
        _require(self.keep_checkpoints >= 1, "keep_checkpoints", self.keep_checkpoints, ">= 1")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(_Section):
    """The whole configuration of a training run.

    ``budget`` has no default because a run without a stop condition is a mistake; build
    one with ``Config(budget=BudgetConfig(generations=10))`` or through :func:`load_config`.
    """

    seed: int = 0
    algorithm: AlgorithmConfig = dataclasses.field(default_factory=AlgorithmConfig)
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    evaluator: EvaluatorConfig = dataclasses.field(default_factory=EvaluatorConfig)
    noise: NoiseConfig = dataclasses.field(default_factory=NoiseConfig)
    budget: BudgetConfig
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)

    def _validate(self) -> None:
        _require(self.seed >= 0, "seed", self.seed, ">= 0")
        kind, model = self.env.kind, self.model
        if kind is EnvKind.MUJOCO:
            _require(
                model.name is ModelName.MLP,
                "model.name",
                model.name,
                "mlp when env.kind is mujoco (the nature nets need image observations)",
            )
            _require(
                model.output is not OutputKind.ARGMAX,
                "model.output",
                "argmax",
                "tanh, clip or null when env.kind is mujoco (continuous actions)",
            )
        if kind is EnvKind.ATARI:
            _require(
                model.output in (None, OutputKind.ARGMAX),
                "model.output",
                model.output,
                "argmax or null when env.kind is atari (discrete actions)",
            )


class _Loader(yaml.SafeLoader):
    """YAML loader that reads ``1e-3`` as a number and rejects duplicate keys.

    PyYAML follows YAML 1.1, where ``1e-3`` and ``2.5e8`` are strings; configs are full of
    such numbers. A repeated key would silently keep only its last value.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key}'", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _parse_yaml(text: str, source: str) -> Any:
    """Parses YAML text, turning syntax errors into a ConfigError with line and column."""
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader derives from SafeLoader: no objects
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{source}: invalid YAML{where}: {err.problem or err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: invalid YAML: {err}") from None


def _unknown_key_error(path: str, name: str, valid: Sequence[str]) -> ConfigError:
    close = difflib.get_close_matches(name, valid, n=3)
    if close:
        hint = "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    else:
        hint = "valid keys here: " + ", ".join(valid)
    return ConfigError(f"unknown key '{path}' ({hint})")


def _from_mapping(section_type: type, data: Any, key: str) -> Any:
    """Builds a section (and its subsections) from a mapping, naming full keys in errors."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"expected a section of keys, got {_show(data)}", key or None)
    fields = dataclasses.fields(section_type)
    names = [field.name for field in fields]
    for name in data:
        if name not in names:
            path = f"{key}.{name}" if key else str(name)
            raise _unknown_key_error(path, str(name), names)
    kwargs = {}
    for field in fields:
        path = f"{key}.{field.name}" if key else field.name
        if dataclasses.is_dataclass(field.type):
            # A section left empty in YAML (all keys commented out) reads as null.
            value = data.get(field.name)
            kwargs[field.name] = _from_mapping(field.type, {} if value is None else value, path)
        elif field.name in data:
            kwargs[field.name] = data[field.name]
    try:
        return section_type(**kwargs)
    except ConfigError as err:
        if not key:
            raise
        raise err.within(key) from None


def config_from_dict(data: Mapping[str, Any]) -> Config:
    """Builds and validates a Config from a nested mapping (parsed YAML).

    Missing keys take their defaults; a missing ``budget`` is an error.

    Args:
        data: Nested mapping with the layout of ``docs/CONFIG.md``.

    Returns:
        The validated config.

    Raises:
        ConfigError: On an unknown key, a wrong type or an out-of-range value.
    """
    return _from_mapping(Config, data, "")


def config_to_dict(section: Any) -> dict[str, Any]:
    """Converts a config (or any section) into plain nested dicts, lists and scalars.

    The result is what :func:`config_from_dict` accepts and what ``yaml.safe_dump`` writes:
    enums become their string values and tuples become lists.
    """
    result: dict[str, Any] = {}
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        if dataclasses.is_dataclass(value):
            value = config_to_dict(value)
        elif isinstance(value, Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        result[field.name] = value
    return result


def _set_override(data: dict[str, Any], item: str) -> None:
    """Applies one ``key.path=value`` string to the nested mapping ``data`` in place."""
    path, sep, text = item.partition("=")
    parts = path.strip().split(".")
    if not sep or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) for p in parts):
        raise ConfigError(f"--set '{item}' must look like key.path=value")
    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            section = ".".join(parts[: depth + 1])
            raise ConfigError(f"--set '{item}': '{section}' is a value, not a section")
        node = child
    node[parts[-1]] = _parse_yaml(text, f"--set '{item}'")


def _merge_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    merged = _deep_copy(data)
    for item in overrides:
        _set_override(merged, item)
    return merged


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in data.items()}


def apply_overrides(cfg: Config, overrides: Sequence[str]) -> Config:
    """Returns ``cfg`` with ``key.path=value`` overrides applied, validated as a whole.

    Values are parsed as YAML, so ``a.b=1e-3`` is a number, ``a.b=[64, 64]`` a list, ``a.b=null``
    clears an optional value and ``a.b=pong`` is a string.

    Args:
        cfg: The config to start from.
        overrides: Strings of the form ``key.path=value``, applied in order.

    Returns:
        A new validated Config.

    Raises:
        ConfigError: On a malformed override, an unknown key or an invalid result.
    """
    return config_from_dict(_merge_overrides(config_to_dict(cfg), overrides))


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> Config:
    """Loads a YAML config file, applies overrides and validates the result.

    Overrides are merged before validation, so they may fix values that the file alone
    leaves inconsistent.

    Args:
        path: YAML file, or None to start from the defaults.
        overrides: ``key.path=value`` strings, applied in order after the file.

    Returns:
        The validated Config.

    Raises:
        ConfigError: If the file is missing, unreadable or not valid YAML, or on any invalid
            key or value.
    """
    data: Any = {}
    if path is not None:
        source = f"config file '{path}'"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{source} not found") from None
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"{source} could not be read: {err}") from None
        data = _parse_yaml(text, source)
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source} must hold a mapping of sections, got {_show(data)}")
    return config_from_dict(_merge_overrides(data, overrides))


def save_config(cfg: Config, path: str | Path) -> None:
    """Writes the resolved config (every key, defaults included) as YAML.

    The file is written next to its destination and renamed into place, so a crash never
    leaves a half-written config. Loading it back with :func:`load_config` gives ``cfg``.

    Args:
        cfg: The config to save.
        path: Destination file.
    """
    path = Path(path)
    text = "# Resolved neuroevo config: every key, defaults included.\n" + yaml.safe_dump(
        config_to_dict(cfg), sort_keys=False
    )
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def diff_incompatible(old: Config, new: Config) -> list[str]:
    """Lists the keys whose change makes resuming a run with ``new`` invalid.

    Everything that shapes the search (seed, algorithm, env, model, noise table) must stay
    the same; ``budget``, ``logging``, ``evaluator`` and ``noise.cache_dir`` may change because
    they affect when the run stops, what it records and how fast it evaluates, not what it
    computes.

    Args:
        old: The config the run was started with.
        new: The config requested for the resumed run.

    Returns:
        Dotted keys that differ, in schema order; empty when resuming is safe.
    """
    before, after = _flatten(config_to_dict(old)), _flatten(config_to_dict(new))
    return [
        key
        for key, value in before.items()
        if value != after[key]
        and not any(key == safe or key.startswith(f"{safe}.") for safe in _RESUME_SAFE_KEYS)
    ]
