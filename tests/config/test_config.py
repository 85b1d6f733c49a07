"""neuroevo.config.schema: defaults, YAML + overrides, every kind of error, resume diffs."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

from neuroevo.algorithms import Decay, GAParams, MutationSchedule
from neuroevo.config.schema import (
    BudgetParams,
    Config,
    ConfigError,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    diff_incompatible,
    load_config,
    save_config,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "CONFIG.md"
BUDGET = ["budget.generations=10"]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def schema_defaults(section_type: type, prefix: str = "") -> dict[str, object]:
    """Default of every leaf key, read from the dataclass fields (Config() needs a budget)."""
    defaults: dict[str, object] = {}
    types = typing.get_type_hints(section_type)
    for field in dataclasses.fields(section_type):
        key = f"{prefix}{field.name}"
        hint = types[field.name]
        # A tagged union's sections are optional: ``GAParams | None``.
        nested = [arg for arg in typing.get_args(hint) if dataclasses.is_dataclass(arg)]
        if dataclasses.is_dataclass(hint) or nested:
            defaults |= schema_defaults(hint if not nested else nested[0], f"{key}.")
        else:
            value = field.default
            if value is dataclasses.MISSING:
                value = field.default_factory()
            defaults[key] = list(value) if isinstance(value, tuple) else value
    return defaults


def test_defaults_follow_the_papers():
    cfg = load_config(None, BUDGET)
    assert cfg.seed == 0
    assert cfg.algorithm.name == "ga"
    ga = cfg.algorithm.ga
    assert (ga.population_size, ga.truncation, ga.mutation_power) == (1000, 20, 0.002)
    assert (ga.validation_candidates, ga.validation_episodes) == (10, 30)
    es = load_config(None, [*BUDGET, "algorithm.name=es"]).algorithm.es
    assert (es.population_size, es.sigma, es.learning_rate, es.l2_coeff) == (
        5000,
        0.02,
        0.01,
        0.005,
    )
    assert es.mirrored and es.center_episodes == 1 and es.fitness_shaping == "centered_rank"
    assert cfg.env.atari.frame_skip == 4 and cfg.env.atari.noop_max == 30
    mlp = load_config(None, [*BUDGET, "model.name=mlp", "env.kind=mujoco", "model.output=clip"])
    assert mlp.model.mlp.hidden_sizes == (256, 256)
    assert cfg.noise.seed == 123 and cfg.noise.size == 250_000_000
    assert cfg.algorithm.selected is ga
    assert cfg == Config(budget=BudgetParams(generations=10))


def test_file_then_overrides_in_order(tmp_path):
    path = write(
        tmp_path,
        "algorithm:\n  name: es\n  es: {population_size: 10, sigma: 1e-3}\n"
        "env: {kind: mujoco, id: Hopper}\nmodel: {name: mlp, mlp: {hidden_sizes: [8]}}\n"
        "budget: {frames: 1e9}\nlogging:\n",
    )
    cfg = load_config(
        path,
        ["algorithm.es.population_size=20", "model.mlp.hidden_sizes=[4, 4]", "seed=3", "seed=4"],
    )
    assert cfg.algorithm.name == "es"
    assert cfg.algorithm.es.population_size == 20
    assert cfg.algorithm.es.sigma == pytest.approx(1e-3)
    assert cfg.env.kind == "mujoco" and cfg.env.id == "Hopper"
    assert cfg.model.mlp.hidden_sizes == (4, 4)
    assert cfg.budget.frames == 1_000_000_000 and isinstance(cfg.budget.frames, int)
    assert cfg.seed == 4
    assert cfg.env.max_episode_steps is None  # the backend's own cutoff


def test_an_override_can_repair_the_file(tmp_path):
    path = write(tmp_path, "algorithm: {ga: {population_size: 10}}\n")
    with pytest.raises(ConfigError, match=r"truncation: 20 must be <= population_size \(10\)"):
        load_config(path, BUDGET)
    repaired = [*BUDGET, "algorithm.ga.truncation=5", "algorithm.ga.validation_candidates=5"]
    assert load_config(path, repaired).algorithm.ga.truncation == 5


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algorithm.ga.populaton=5"],
            "unknown key 'algorithm.ga.populaton' (did you mean 'population_size'",
        ),
        (["algoritm.name=ga"], "unknown key 'algoritm' (did you mean 'algorithm'?)"),
        (
            ["env.zzz=1"],
            "unknown key 'env.zzz' "
            "(valid keys here: kind, id, max_episode_steps, decrease_training_rewards_by, "
            "atari, mujoco, gym, maze)",
        ),
        (
            ["algorithm.ga.truncation=2000"],
            "algorithm.ga.truncation: 2000 must be <= population_size (1000)",
        ),
        (
            ["algorithm.es.population_size=5001"],
            "algorithm.es.population_size: 5001 must be even when mirrored",
        ),
        (
            ["algorithm.ga.population_size=abc"],
            "algorithm.ga.population_size: expected an integer, got 'abc'",
        ),
        (
            ["algorithm.ga.population_size=2.5"],
            "algorithm.ga.population_size: expected an integer, got 2.5",
        ),
        (["algorithm.es.mirrored=1"], "algorithm.es.mirrored: expected true or false, got 1"),
        (["algorithm.es.sigma=true"], "algorithm.es.sigma: expected a number, got true"),
        (["algorithm.es.sigma=.nan"], "algorithm.es.sigma: nan must be a finite number"),
        (
            ["algorithm.name=gaa"],
            "algorithm.name: 'gaa' is not one of 'ga', 'es', 'random_search', 'ns_es'",
        ),
        (
            ["env.atari.sticky_action_prob=1.5"],
            "env.atari.sticky_action_prob: 1.5 must be in [0, 1]",
        ),
        (["env.id=''"], "env.id: '' must be a non-empty name"),
        (["env.id=null"], "env.id: must not be null"),
        (["model.mlp.hidden_sizes=[64, 0]"], "model.mlp.hidden_sizes[1]: 0 must be >= 1"),
        (["model.mlp.hidden_sizes=64"], "model.mlp.hidden_sizes: expected a list, got 64"),
        (["algorithm.ga=3"], "algorithm.ga: expected a section of keys, got 3"),
        (["noise.size=0"], "noise.size: 0 must be > 0"),
        (["budget.generations=null"], "budget: set at least one of generations, frames or hours"),
        (["budget.hours=-1"], "budget.hours: -1.0 must be > 0 or null"),
        (["evaluator.workers=0"], "evaluator.workers: 0 must be > 0 or null"),
        (
            ["env.kind=mujoco"],
            "model.name: 'nature_large' must be mlp or lstm or gru when env.kind is mujoco",
        ),
        (
            ["model.output=tanh"],
            "model.output: 'tanh' must be argmax or null when env.kind is atari",
        ),
        (["foo"], "--set 'foo' must look like key.path=value"),
        (["=3"], "--set '=3' must look like key.path=value"),
        (["a..b=3"], "--set 'a..b=3' must look like key.path=value"),
        (["env.id=[pong"], "--set 'env.id=[pong': invalid YAML at line 1"),
    ],
)
def test_errors_name_the_key_and_what_is_allowed(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [*BUDGET, *overrides])
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_overriding_inside_a_value_is_refused(tmp_path):
    path = write(tmp_path, "seed: 3\n")
    with pytest.raises(ConfigError, match=r"--set 'seed\.x=1': 'seed' is a value, not a section"):
        load_config(path, [*BUDGET, "seed.x=1"])


def test_budget_is_required():
    with pytest.raises(ConfigError, match=r"^budget: set at least one"):
        load_config(None)
    with pytest.raises(TypeError):
        Config()


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"config file '.*nope\.yaml' not found"):
        load_config(tmp_path / "nope.yaml")
    bad = write(tmp_path, "seed: 1\nalgorithm:\n  name: [ga\nenv: {}\n")
    with pytest.raises(ConfigError, match=r"invalid YAML at line \d+, column \d+") as info:
        load_config(bad)
    assert "run.yaml" in str(info.value)
    indent = write(tmp_path, "seed: 1\n  env: 2\n")
    with pytest.raises(ConfigError, match="at line 2"):
        load_config(indent)
    with pytest.raises(ConfigError, match="must hold a mapping of sections, got"):
        load_config(write(tmp_path, "- 1\n- 2\n"))
    with pytest.raises(ConfigError, match=r"line 3, column 5: duplicate key 'truncation'"):
        load_config(write(tmp_path, "algorithm:\n  ga: {truncation: 10,\n    truncation: 20}\n"))
    with pytest.raises(ConfigError, match=r"unknown key 'algorithm\.ga\.populaton'"):
        load_config(write(tmp_path, "algorithm:\n  ga:\n    populaton: 10\n"), BUDGET)


def test_sections_validate_when_built_in_python():
    with pytest.raises(ConfigError, match=r"^truncation: 20 must be <= population_size \(10\)$"):
        GAParams(population_size=10)
    ga = GAParams(population_size=10, truncation=2, validation_candidates=3)
    assert dataclasses.replace(ga, mutation_power=0.01).mutation_power == 0.01
    with pytest.raises(ConfigError, match="mutation_power"):
        dataclasses.replace(ga, mutation_power=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ga.population_size = 3  # type: ignore[misc]
    assert MutationSchedule(decay="linear").decay is Decay.LINEAR


def test_random_configs_round_trip_through_yaml(tmp_path, rng):
    for trial in range(5):
        population = int(rng.integers(2, 50)) * 2
        overrides = [
            f"seed={int(rng.integers(0, 2**40))}",
            f"algorithm.name={rng.choice(['ga', 'es', 'random_search'])}",
            f"algorithm.ga.population_size={population}",
            f"algorithm.ga.truncation={int(rng.integers(1, population + 1))}",
            f"algorithm.ga.validation_candidates={int(rng.integers(2, population))}",
            f"algorithm.es.population_size={population}",
            f"algorithm.es.sigma={rng.uniform(1e-6, 1):.6e}",
            f"algorithm.es.fitness_shaping={rng.choice(['centered_rank', 'standardize'])}",
            f"model.mlp.hidden_sizes={rng.integers(1, 512, size=rng.integers(0, 4)).tolist()}",
            f"env.atari.sticky_action_prob={rng.uniform()}",
            f"budget.hours={rng.uniform(0.01, 100)}",
            f"noise.cache_dir={tmp_path / str(trial)}",
        ]
        cfg = load_config(None, overrides)
        path = tmp_path / f"{trial}.yaml"
        save_config(cfg, path)
        assert load_config(path) == cfg, f"overrides {overrides}"
        assert config_from_dict(yaml.safe_load(path.read_text())) == cfg
        assert apply_overrides(cfg, []) == cfg


def test_config_to_dict_is_plain_yaml():
    data = config_to_dict(load_config(None, [*BUDGET, "model.name=mlp", "env.kind=mujoco"]))
    assert data["algorithm"]["name"] == "ga" and type(data["algorithm"]["name"]) is str
    assert data["model"]["mlp"]["hidden_sizes"] == [256, 256]
    yaml.safe_dump(data)  # raises on anything that is not plain data


def test_apply_overrides_returns_a_new_validated_config():
    cfg = load_config(None, BUDGET)
    changed = apply_overrides(cfg, ["algorithm.ga.population_size=30", "algorithm.ga.truncation=3"])
    assert (changed.algorithm.ga.population_size, cfg.algorithm.ga.population_size) == (30, 1000)
    with pytest.raises(ConfigError, match="truncation"):
        apply_overrides(cfg, ["algorithm.ga.population_size=10"])


def test_diff_incompatible_allows_budget_logging_and_evaluator():
    old = load_config(None, BUDGET)
    safe = apply_overrides(
        old,
        [
            "budget.hours=3",
            "logging.keep_checkpoints=9",
            "evaluator.workers=4",
            "evaluator.device=/GPU:0",
            "noise.cache_dir=/tmp/x",
        ],
    )
    assert diff_incompatible(old, safe) == []
    unsafe = apply_overrides(
        safe, ["algorithm.ga.population_size=500", "env.id=frostbite", "seed=1"]
    )
    assert diff_incompatible(old, unsafe) == ["seed", "algorithm.ga.population_size", "env.id"]


def test_docs_list_every_key_with_its_default():
    rows = {}
    for line in DOCS.read_text().splitlines():
        match = re.match(r"\| `([a-z0-9_.]+)` \| [^|]+ \| `([^`]*)` \|", line)
        if match:
            rows[match.group(1)] = yaml.safe_load(match.group(2))
    defaults = {
        key: getattr(value, "value", value) for key, value in schema_defaults(Config).items()
    }
    assert sorted(rows) == sorted(defaults)
    for key, default in defaults.items():
        assert rows[key] == default, key


ROOT = DOCS.parents[1]
HEAVY_MODULES = ("tensorflow", "ale_py", "mujoco", "gymnasium", "neuroevo.envs.base")


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        check=False,
    )


def test_loading_and_validating_every_config_imports_no_tensorflow() -> None:
    """The registries' choice lists and sections are declared apart from the implementations,
    so a config (every shipped one, plus a cross-component check that fails) is read and
    validated without importing TensorFlow or any env backend."""
    configs = sorted(str(p) for p in (ROOT / "configs").glob("*.yaml"))
    done = run_python(
        f"""
import json, sys
from neuroevo.config.schema import ConfigError, load_config
for path in {configs!r}:
    load_config(path)
try:
    load_config(None, ["budget.generations=1", "env.kind=mujoco", "model.name=nature_small"])
except ConfigError as exc:
    print(exc, file=sys.stderr)
heavy = [m for m in sys.modules if m.split(".")[0] in {HEAVY_MODULES!r} or m in {HEAVY_MODULES!r}]
print(json.dumps(heavy))
"""
    )
    assert done.returncode == 0, done.stderr
    assert "model.name" in done.stderr  # the failing check ran
    assert json.loads(done.stdout) == []


def test_a_bad_config_exits_2_before_tensorflow_is_imported(tmp_path: Path) -> None:
    """With TensorFlow made unimportable, a bad config still gets its one-line error and exit
    code 2: the CLI rejects it before paying TensorFlow's import time."""
    bad = write(tmp_path, "algorithm:\n  ga: {truncation: 0}\nbudget: {generations: 1}\n")
    done = run_python(
        f"""
import sys
sys.modules["tensorflow"] = None  # any import of it raises ImportError
from neuroevo.cli import train
sys.exit(train.main(["--config", {str(bad)!r}, "--run-dir", {str(tmp_path / "run")!r}]))
"""
    )
    assert done.returncode == 2, done.stderr
    assert "algorithm.ga.truncation" in done.stderr
    assert "ImportError" not in done.stderr and not (tmp_path / "run").exists()
