"""The configuration of a training run: composition of the components' declared parameters.

Every setting of ``python -m neuroevo.train`` lives in one tree of frozen dataclasses rooted at
:class:`Config`, so a run's behaviour is fully described by a value that can be compared,
saved next to the run and diffed on resume. Settings come from a YAML file plus ``--set``
overrides; both are merged into one mapping and validated once, so an override can repair a
value the file alone would make invalid (e.g. lower ``truncation`` together with
``population_size``).

This module declares no component's parameters: ``algorithm.<name>``, ``env.<kind>`` and
``model.<name>`` are the classes the registries (``ALGORITHMS``, ``ENV_KINDS``, ``MODELS``)
point to (:mod:`neuroevo.core.params` explains the mechanism), and every choice list is a registry's
keys. Registering a new algorithm, env kind or model therefore adds its section here with no
edit to this file. What is declared here belongs to the training run itself: seeds, budget,
logging, evaluator and noise-table settings.

Every failure is a :class:`ConfigError` whose message names the full key the user wrote, the
offending value and what is allowed; a key that was renamed names its new spelling. The
reference of every key is ``docs/CONFIG.md``; a test keeps it in sync with this module.
"""

import dataclasses
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from neuroevo.algorithms import ALGORITHMS
from neuroevo.config.overrides import Overrides, merge_overrides
from neuroevo.config.sections import registered_sections, select, unselected
from neuroevo.config.yaml import read_config_file
from neuroevo.core.files import atomic_write
from neuroevo.core.limits import MAX_RAY_WORKERS_PER_NODE, MAX_SLOTS, MAX_THREADS
from neuroevo.core.params import (
    ParamError,
    Params,
    check,
    check_choice,
    from_mapping,
    show,
    to_dict,
)
from neuroevo.envs import ENV_KINDS
from neuroevo.evaluation.behavior_params import BehaviorParams
from neuroevo.genomes.noise import DEFAULT_SIZE
from neuroevo.loggers.params import MlflowParams, WandbParams
from neuroevo.models import MODELS
from neuroevo.models.params import DISCRETE_OUTPUTS, OUTPUTS, ModelParams

ConfigError = ParamError
"""An invalid config file, key or value (a ``ValueError``); see :class:`ParamError`."""

# Settings that may change when a run is resumed: they decide when to stop, what to log and
# how fast evaluation runs, never which genomes are produced or how they score.
RESUME_SAFE_KEYS = ("budget", "logging", "evaluator", "test", "noise.cache_dir")

# Longest episode cap: step counters in the env ops are 32-bit.
MAX_EPISODE_STEPS = 2**31 - 1


def _section_class(
    name: str, doc: str, fields: list[tuple[str, Any, Any]], **namespace: Any
) -> type[Params]:
    """A frozen Params dataclass with ``fields`` and ``namespace`` (methods, ``renamed``)."""
    section = dataclasses.make_dataclass(
        name, fields, bases=(Params,), frozen=True, namespace={"__doc__": doc, **namespace}
    )
    section.__module__ = __name__
    return section


def _validate_algorithm(self: Any) -> None:
    check_choice(self.name, ALGORITHMS, "name")
    select(self, ALGORITHMS, self.name)


def _selected_algorithm(self: Any) -> Params:
    """The parameters of the algorithm named by ``name``."""
    return getattr(self, self.name)


AlgorithmSection = _section_class(
    "AlgorithmSection",
    """The chosen optimizer and its parameters (a tagged union on ``name``).

    Only the section named by ``name`` is kept (with its defaults when absent); a section of
    another optimizer is validated when given, then dropped: never used, saved or compared.
    """,
    [
        ("name", str, dataclasses.field(default="ga")),
        *registered_sections(ALGORITHMS),
    ],
    _validate=_validate_algorithm,
    selected=property(_selected_algorithm),
)


def _validate_env(self: Any) -> None:
    check_choice(self.kind, ENV_KINDS, "kind")
    select(self, ENV_KINDS, self.kind)
    check(bool(self.id.strip()), "id", self.id, "a non-empty name")
    check(
        self.max_episode_steps is None or 0 < self.max_episode_steps <= MAX_EPISODE_STEPS,
        "max_episode_steps",
        self.max_episode_steps,
        f"in [1, {MAX_EPISODE_STEPS}] or null",
    )
    shift = self.decrease_training_rewards_by
    check(math.isfinite(shift), "decrease_training_rewards_by", shift, "a finite number")


def _env_options(self: Any) -> Params:
    """The options section of the env kind named by ``kind``."""
    return getattr(self, self.kind)


EnvSection = _section_class(
    "EnvSection",
    """Which environment runs the episodes, and the options of its kind (a tagged union on
    ``kind``: another kind's section is validated when given, then dropped).

    ``id`` is only checked to be a non-empty string here; the backend checks that the game,
    task or gymnasium id exists. ``max_episode_steps`` null keeps the backend's default cutoff.
    ``decrease_training_rewards_by`` is subtracted from every step's reward in the returns the
    optimizer learns from, never in reported or tested returns: ARS's ``shift`` (Mania et al.
    2018 remove the alive bonus, 1 on Hopper, Walker2d and Ant, 5 on Humanoid, so that standing
    still stops paying), EvoTorch's ``decrease_rewards_by``.
    """,
    [
        ("kind", str, dataclasses.field(default="atari")),
        ("id", str, dataclasses.field(default="pong")),
        ("max_episode_steps", int | None, dataclasses.field(default=None)),
        ("decrease_training_rewards_by", float, dataclasses.field(default=0.0)),
        *registered_sections(ENV_KINDS),
    ],
    _validate=_validate_env,
    options=property(_env_options),
)


def _validate_model(self: Any) -> None:
    check_choice(self.name, MODELS, "name")
    select(self, MODELS, self.name)
    ModelParams(**self.shared_options)
    check(
        0 < self.obs_stats_fraction <= 1,
        "obs_stats_fraction",
        self.obs_stats_fraction,
        "in (0, 1]",
    )


def _model_shared_options(self: Any) -> dict[str, Any]:
    """The keys of :class:`ModelParams`, which every model takes."""
    return {field.name: getattr(self, field.name) for field in dataclasses.fields(ModelParams)}


def _model_options(self: Any) -> dict[str, Any]:
    """Keyword options of the model named by ``name``: shared ones plus its own section."""
    own = getattr(self, self.name, None)  # a model without keys of its own has no section
    return self.shared_options | ({} if own is None else to_dict(own))


ModelSection = _section_class(
    "ModelSection",
    """Policy network: which registered model, the options every model takes (those of
    :class:`~neuroevo.models.ModelParams`), the chosen model's own section (a tagged union on
    ``name``: another model's section is validated when given, then dropped), and how many
    episodes feed the observation statistics of a model that normalises observations.
    """,
    [
        ("name", str, dataclasses.field(default="nature_large")),
        *(
            (field.name, field.type, dataclasses.field(default=field.default))
            for field in dataclasses.fields(ModelParams)
        ),
        ("obs_stats_fraction", float, dataclasses.field(default=0.01)),
        *registered_sections(MODELS),
    ],
    _validate=_validate_model,
    shared_options=property(_model_shared_options),
    options=property(_model_options),
    renamed={"observation_normalization": "mlp.observation_normalization"},
)


@dataclasses.dataclass(frozen=True)
class RayParams(Params):
    """Where the Ray backend finds its cluster (``evaluator.backend: ray``, docs/DISTRIBUTED.md).

    Attributes:
        address: null starts Ray on this machine, ``auto`` joins the cluster this machine belongs
            to, ``host:port`` a head node, ``ray://host:port`` a Ray client server.
        workers_per_node: evaluator actors per node, each with an equal share of its CPUs.
    """

    address: str | None = None
    workers_per_node: int = 1

    def _validate(self) -> None:
        check(
            1 <= self.workers_per_node <= MAX_RAY_WORKERS_PER_NODE,
            "workers_per_node",
            self.workers_per_node,
            f"in [1, {MAX_RAY_WORKERS_PER_NODE}] (each is a process with its own TensorFlow, "
            "env and noise table)",
        )


TEST_POLICIES = ("best", "elite")
"""What the trainer's test plays: ``best.npz`` or ``elite.npz`` (:class:`PaperTestParams`)."""

EVALUATOR_BACKENDS = ("local", "ray")
"""``local``: worker threads in this process; ``ray``: actors on a Ray cluster."""


@dataclasses.dataclass(frozen=True)
class EvaluatorParams(Params):
    """How evaluation is spread over workers and devices; null means chosen automatically.

    With ``backend: ray`` every actor builds its own env, model and noise table from this config
    and runs a local evaluator with ``workers`` / ``slots_per_worker``.
    """

    backend: str = "local"
    workers: int | None = None
    slots_per_worker: int | None = None
    device: str | None = None
    rollout: str = "auto"
    chunk_steps: int = 128
    ray: RayParams = dataclasses.field(default_factory=RayParams)

    def _validate(self) -> None:
        check_choice(self.backend, EVALUATOR_BACKENDS, "backend")
        _check_positive_or_null(self, "workers", "slots_per_worker")
        check(
            self.workers is None or self.workers <= MAX_THREADS,
            "workers",
            self.workers,
            f"<= {MAX_THREADS} or null (each worker is a thread plus a TensorFlow thread)",
        )
        check(
            self.slots_per_worker is None or self.slots_per_worker <= MAX_SLOTS,
            "slots_per_worker",
            self.slots_per_worker,
            f"<= {MAX_SLOTS} or null",
        )
        if self.workers is not None and self.slots_per_worker is not None:
            slots = self.workers * self.slots_per_worker
            check(
                slots <= MAX_SLOTS,
                "slots_per_worker",
                self.slots_per_worker,
                f"at most {MAX_SLOTS // self.workers} with {self.workers} workers (an env "
                f"holds at most {MAX_SLOTS} slots, these ask for {slots})",
            )
        check(
            self.device is None or bool(self.device.strip()),
            "device",
            self.device,
            "a TensorFlow device string such as '/GPU:0', or null",
        )
        check_choice(self.rollout, ("auto", "graph", "step"), "rollout")
        check(self.chunk_steps >= 1, "chunk_steps", self.chunk_steps, ">= 1")


@dataclasses.dataclass(frozen=True)
class NoiseParams(Params):
    """Shared Gaussian noise table from which every mutation and perturbation is sliced."""

    seed: int = 123
    size: int = DEFAULT_SIZE
    cache_dir: str | None = None

    def _validate(self) -> None:
        check(self.seed >= 0, "seed", self.seed, ">= 0")
        check(self.size > 0, "size", self.size, "> 0")
        check(
            self.cache_dir is None or bool(self.cache_dir.strip()),
            "cache_dir",
            self.cache_dir,
            "a directory, or null for the default cache (NEUROEVO_CACHE, ~/.cache/neuroevo)",
        )


@dataclasses.dataclass(frozen=True)
class BudgetParams(Params):
    """When training stops: at the first limit reached. At least one of generations, frames
    and hours is required (a target return alone might never be reached)."""

    generations: int | None = None
    frames: int | None = None
    hours: float | None = None
    target_return: float | None = None

    def _validate(self) -> None:
        if self.generations is None and self.frames is None and self.hours is None:
            raise ConfigError("set at least one of generations, frames or hours (all are null)")
        _check_positive_or_null(self, "generations", "frames", "hours")
        check(
            self.target_return is None or math.isfinite(self.target_return),
            "target_return",
            self.target_return,
            "a finite number or null",
        )


@dataclasses.dataclass(frozen=True)
class LoggingParams(Params):
    """What the run directory records and how often, and the experiment trackers (W&B,
    MLflow) that also get the metrics; a tracker is on when its section is given."""

    checkpoint_every_generations: int | None = 1
    checkpoint_every_minutes: float | None = None
    keep_checkpoints: int = 3
    tensorboard: bool = True
    progress: bool = True
    wandb: WandbParams | None = None
    mlflow: MlflowParams | None = None

    def _validate(self) -> None:
        _check_positive_or_null(self, "checkpoint_every_generations", "checkpoint_every_minutes")
        check(self.keep_checkpoints >= 1, "keep_checkpoints", self.keep_checkpoints, ">= 1")


@dataclasses.dataclass(frozen=True)
class PaperTestParams(Params):
    """Scoring the best elite as the papers did (Such et al. 2017: 200 episodes with up to 30
    random no-ops), during training and by ``python -m neuroevo.evaluate``.

    The test never changes the search: its episodes use their own seeds and a separate env.
    ``policy`` picks what the trainer tests: ``best`` (``best.npz``, the elite with the best
    score of its own, as the GA paper reports) or ``elite`` (``elite.npz``, the current elite:
    for ES, ARS and the Gaussian strategies the current centre, the learning curve of the
    policy a user would keep, which needs no centre phase).
    """

    every_generations: int | None = None
    at_end: bool = False
    episodes: int = 200
    noop_max: int = 30
    max_episode_steps: int | None = None
    policy: str = "best"

    def _validate(self) -> None:
        check_choice(self.policy, TEST_POLICIES, "policy")
        _check_positive_or_null(self, "every_generations", "max_episode_steps")
        check(self.episodes >= 1, "episodes", self.episodes, ">= 1")
        check(self.noop_max >= 0, "noop_max", self.noop_max, ">= 0")


def _check_positive_or_null(section: Params, *names: str) -> None:
    """Checks that each named optional numeric field is either null or > 0."""
    for name in names:
        value = getattr(section, name)
        check(value is None or value > 0, name, value, "> 0 or null")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(Params):
    """The whole configuration of a training run.

    ``budget`` has no default because a run without a stop condition is a mistake; build
    one with ``Config(budget=BudgetParams(generations=10))`` or through :func:`load_config`.
    """

    seed: int = 0
    algorithm: AlgorithmSection = dataclasses.field(default_factory=AlgorithmSection)
    env: EnvSection = dataclasses.field(default_factory=EnvSection)
    model: ModelSection = dataclasses.field(default_factory=ModelSection)
    evaluator: EvaluatorParams = dataclasses.field(default_factory=EvaluatorParams)
    behavior: BehaviorParams = dataclasses.field(default_factory=BehaviorParams)
    noise: NoiseParams = dataclasses.field(default_factory=NoiseParams)
    budget: BudgetParams
    logging: LoggingParams = dataclasses.field(default_factory=LoggingParams)
    test: PaperTestParams = dataclasses.field(default_factory=PaperTestParams)

    def _validate(self) -> None:
        check(self.seed >= 0, "seed", self.seed, ">= 0")
        self._check_model_fits_env()
        self._check_action_noise_fits_env()

    def _check_action_noise_fits_env(self) -> None:
        """Rejects action noise (ES ``action_noise_std``) for an env with discrete actions."""
        noise_std = getattr(self.algorithm.selected, "action_noise_std", 0.0)
        if noise_std > 0 and ENV_KINDS.declared(self.env.kind, "discrete_actions"):
            check(
                False,
                f"algorithm.{self.algorithm.name}.action_noise_std",
                noise_std,
                f"0 when env.kind is {self.env.kind} (discrete actions: Gaussian action "
                "noise applies to continuous actions only)",
            )

    def _check_model_fits_env(self) -> None:
        """Rejects a model that cannot read the env's observations or emit its actions, from
        what the registered classes declare, before anything is built."""
        kind, model = self.env.kind, self.model
        images = ENV_KINDS.declared(kind, "image_observations")
        needs = {name: MODELS.declared(name, "image_observations") for name in MODELS}
        if images is not None and needs[model.name] not in (None, images):
            fits = [name for name, need in needs.items() if need in (None, images)]
            what = "image" if images else "vector"
            check(
                False,
                "model.name",
                model.name,
                f"{' or '.join(fits)} when env.kind is {kind} ({what} observations)",
            )
        discrete = ENV_KINDS.declared(kind, "discrete_actions")
        if discrete is not None and model.output is not None:
            fits = [o for o in OUTPUTS if (o in DISCRETE_OUTPUTS) == discrete]
            what = "discrete" if discrete else "continuous"
            check(
                model.output in fits,
                "model.output",
                model.output,
                f"{', '.join(fits)} or null when env.kind is {kind} ({what} actions)",
            )


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
    return from_mapping(Config, data)


def config_to_dict(section: Params) -> dict[str, Any]:
    """Converts a config (or any section) into plain nested dicts, lists and scalars.

    The result is what :func:`config_from_dict` accepts and what ``yaml.safe_dump`` writes;
    the sections a tagged union dropped (another optimizer's, env kind's or model's) are left
    out.
    """
    data = to_dict(section)
    if isinstance(section, Config):
        unions = (
            ("algorithm", ALGORITHMS, section.algorithm.name),
            ("env", ENV_KINDS, section.env.kind),
            ("model", MODELS, section.model.name),
        )
        for key, registry, chosen in unions:
            for name in unselected(registry, chosen):
                data[key].pop(name, None)
    return data


def apply_overrides(cfg: Config, overrides: Overrides) -> Config:
    """Returns ``cfg`` with overrides applied, validated as a whole.

    String values are parsed as YAML, so ``a.b=1e-3`` is a number, ``a.b=[64, 64]`` a list,
    ``a.b=null`` clears an optional value and ``a.b=pong`` is a string.

    Args:
        cfg: The config to start from.
        overrides: ``key.path=value`` strings or a mapping of dotted keys to values
            (:data:`Overrides`), applied in order.

    Returns:
        A new validated Config.

    Raises:
        ConfigError: On a malformed override, an unknown key or an invalid result.
    """
    return config_from_dict(merge_overrides(config_to_dict(cfg), overrides))


def load_config(path: str | os.PathLike[str] | None, overrides: Overrides = ()) -> Config:
    """Loads a YAML config file, applies overrides and validates the result.

    Overrides are merged before validation, so they may fix values that the file alone
    leaves inconsistent.

    Args:
        path: YAML file, or None to start from the defaults.
        overrides: applied in order after the file (:data:`Overrides`).

    Returns:
        The validated Config.

    Raises:
        ConfigError: If the file is missing, unreadable or not valid YAML, or on any invalid
            key or value.
    """
    data: Any = {}
    if path is not None:
        source = f"config file '{path}'"
        data = read_config_file(path, source)
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source} must hold a mapping of sections, got {show(data)}")
    return config_from_dict(merge_overrides(data, overrides))


def save_config(cfg: Config, path: str | Path) -> None:
    """Writes the resolved config (every key of the selected sections, defaults included) as
    YAML.

    The file is written next to its destination and renamed into place
    (:func:`neuroevo.core.files.atomic_write`), so a crash never leaves a half-written config and a
    link planted at the temporary name is never written through. Loading it back with
    :func:`load_config` gives ``cfg``.

    Args:
        cfg: The config to save.
        path: Destination file.
    """
    path = Path(path)
    header = (
        "# Resolved neuroevo config: every key, defaults included (of the algorithm, env kind\n"
        "# and model, the selected sections only).\n"
    )
    text = header + yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
    with atomic_write(path) as file:
        file.write(text.encode("utf-8"))


def imported_modules(cfg: Config) -> dict[str, str]:
    """The Python modules a run of ``cfg`` imports, by the key that names each (``env.id`` of
    the form ``module:Name-v0``, ``env.gym.behavior``): their code runs in the run, so such a
    config is code (README, "Trust")."""
    env = cfg.env
    return {
        "env.id" if key == "id" else f"env.{env.kind}.{key}": module
        for key, module in env.options.imports(env.id).items()
    }


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
    the same (of the algorithm, env and model, only the selected sections count); ``budget``,
    ``logging``, ``evaluator`` and ``noise.cache_dir`` may change because they affect when the
    run stops, what it records and how fast it evaluates, not what it computes.

    Args:
        old: The config the run was started with.
        new: The config requested for the resumed run.

    Returns:
        Dotted keys that differ, in schema order; empty when resuming is safe.
    """
    before, after = _flatten(config_to_dict(old)), _flatten(config_to_dict(new))
    missing = object()
    keys = [*before, *(key for key in after if key not in before)]
    return [
        key
        for key in keys
        if before.get(key, missing) != after.get(key, missing)
        and not any(key == safe or key.startswith(f"{safe}.") for safe in RESUME_SAFE_KEYS)
    ]
