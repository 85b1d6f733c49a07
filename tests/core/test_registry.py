"""One declaration per component: the config sections are the components' own classes, built
through the registries; docstring examples run; a new model is one file plus a registry line."""

from __future__ import annotations

import csv
import dataclasses
import doctest
import inspect
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import numpy as np
import pytest
import yaml

import neuroevo.algorithms
import neuroevo.algorithms.fitness_loop
import neuroevo.core.params
import neuroevo.envs
import neuroevo.evaluation.evaluator
import neuroevo.models
from neuroevo.algorithms import ALGORITHMS, make_algorithm
from neuroevo.config.schema import ConfigError, EnvSection, ModelSection, NoiseParams, load_config
from neuroevo.core.registry import Lazy, Registry
from neuroevo.envs import ENV_KINDS
from neuroevo.genomes.noise import DEFAULT_SIZE, NoiseTable
from neuroevo.models import MODELS, ModelParams

ROOT = Path(__file__).resolve().parents[2]
BUDGET = ["budget.generations=1"]


def section_types(section: type) -> dict[str, type]:
    """Field types, a tagged union's optional sections (``GAParams | None``) unwrapped."""
    types = {}
    for name, hint in typing.get_type_hints(section).items():
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        types[name] = args[0] if len(args) == 1 and isinstance(args[0], type) else hint
    return types


def test_config_sections_are_the_components_own_classes() -> None:
    algorithm = section_types(load_config(None, BUDGET).algorithm.__class__)
    for name, cls in ALGORITHMS.items():
        assert algorithm[name] is cls.params_class
    env = section_types(EnvSection)
    for kind, cls in ENV_KINDS.items():
        assert env[kind] is cls.params_class
    model = section_types(ModelSection)
    for name, cls in MODELS.items():  # a model without keys of its own has no section
        has_keys = cls.params_class is not None and dataclasses.fields(cls.params_class)
        assert model.get(name) is (cls.params_class if has_keys else None)
    shared = {f.name: f.default for f in dataclasses.fields(ModelParams)}
    assert {name: getattr(ModelSection(), name) for name in shared} == shared
    assert NoiseParams().size == DEFAULT_SIZE


def test_an_entry_is_read_without_import_and_checked_on_import() -> None:
    """Built-in entries name a params class in a light module; the class must agree when
    loaded. An entry states nothing else: capabilities are read from the params class."""
    for registry in (ENV_KINDS, MODELS, ALGORITHMS):
        for name in registry:
            cls = registry[name]  # loads and checks the entry
            assert registry.params_class(name) is cls.params_class
    lying = Registry("model")
    lying.register("mlp", "neuroevo.models.mlp:MLP", params="neuroevo.models.params:ModelParams")
    assert lying.params_class("mlp") is ModelParams
    with pytest.raises(TypeError, match=r"MLP\.params_class is .*MlpParams.* registered with"):
        lying["mlp"]
    with pytest.raises(ValueError, match=r"'package\.module:Class'"):
        Lazy("neuroevo.models.mlp.MLP")
    with pytest.raises(ValueError, match=r"'mlp' is already registered"):
        MODELS.register("mlp", "neuroevo.models.mlp:MLP")
    with pytest.raises(ValueError, match=r"a model name is lower case"):
        MODELS.register("My-Model", "neuroevo.models.mlp:MLP")
    missing = Registry("model", {"ghost": "neuroevo.models.mlp:Ghost"})
    with pytest.raises(ImportError, match=r"has no 'Ghost'"):
        missing["ghost"]


def test_capabilities_are_declared_by_the_params_classes_only() -> None:
    """What the config checks before building (image vs vector observations, discrete
    actions, behaviours) is read from the params classes, and no component class restates
    it."""
    assert ENV_KINDS.declared("atari", "image_observations") is True
    assert ENV_KINDS.declared("mujoco", "discrete_actions") is False
    assert ENV_KINDS.declared("gym", "discrete_actions") is None
    assert MODELS.declared("nature_small", "image_observations") is True
    assert MODELS.declared("mlp", "image_observations") is False
    assert ALGORITHMS.declared("nsr_es", "needs_behavior") is True
    assert ALGORITHMS["ga_ns"].needs_behavior and not ALGORITHMS["ga"].needs_behavior
    for registry, capabilities in (
        (ENV_KINDS, ("image_observations", "discrete_actions")),
        (MODELS, ("image_observations",)),
        (ALGORITHMS, ("needs_behavior",)),
    ):
        for name in registry:
            source = inspect.getsource(registry[name])
            for capability in capabilities:
                assert f"{capability} =" not in source, (name, capability)


def test_loading_a_config_imports_no_component() -> None:
    """Every registry entry is lazy: a config loads without TensorFlow or any component."""
    probe = (
        "import sys\n"
        "from neuroevo.config.schema import load_config\n"
        "load_config(None, ['budget.generations=1'])\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] == 'tensorflow' or m in (\n"
        "    'neuroevo.envs.atari', 'neuroevo.models.nature', 'neuroevo.envs.base')]\n"
        "print(heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        check=True,
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "component",
    [*ENV_KINDS.values(), *MODELS.values()],
    ids=lambda c: c.__name__,
)
def test_constructors_do_not_redeclare_their_options(component: type) -> None:
    """Options reach constructors as ``**options`` read into the params class, so the class
    holds the only default of each."""
    declared = (
        {f.name for f in dataclasses.fields(ModelParams)} if component in MODELS.values() else set()
    )
    if component.params_class is not None:
        declared |= {f.name for f in dataclasses.fields(component.params_class)}
    parameters = set(inspect.signature(component.__init__).parameters)
    assert not declared & parameters


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.algorithm.selected is not None


@pytest.mark.parametrize(
    ("override", "new_key"),
    [
        ("algorithm.ga.population=10", "algorithm.ga.population_size"),
        ("algorithm.es.population=10", "algorithm.es.population_size"),
        (
            "algorithm.random_search.episodes_per_genome=2",
            "algorithm.random_search.population_episodes",
        ),
        ("algorithm.es.eval_center=false", "algorithm.es.center_episodes"),
        ("algorithm.ga.mutation_schedule.kind=linear", "algorithm.ga.mutation_schedule.decay"),
        ("model.observation_normalization=true", "model.mlp.observation_normalization"),
    ],
)
def test_old_key_names_point_to_the_new_ones(override: str, new_key: str) -> None:
    old_key = override.partition("=")[0]
    with pytest.raises(ConfigError, match=re.escape(f"key '{old_key}' was renamed to '{new_key}'")):
        load_config(None, [*BUDGET, override])


def test_random_search_population_is_checked_once_with_the_users_key() -> None:
    with pytest.raises(
        ConfigError, match=r"^algorithm\.random_search\.population_size: 1 must be >= 2$"
    ):
        load_config(None, [*BUDGET, "algorithm.random_search.population_size=1"])


def test_zero_validation_candidates_skips_validation() -> None:
    cfg = load_config(
        None,
        [
            *BUDGET,
            "algorithm.ga.population_size=6",
            "algorithm.ga.truncation=2",
            "algorithm.ga.validation_candidates=0",
        ],
    )
    ga = make_algorithm(
        "ga",
        num_params=3,
        scales=1.0,
        noise=NoiseTable(seed=0, size=10_000, cache_dir=False),
        **neuroevo.core.params.to_dict(cfg.algorithm.ga),
    )
    request = ga.ask()
    summary = ga.tell(request, [[float(i)] for i in range(5)])  # N - 1 new individuals
    assert summary is not None  # no validation phase
    assert ga.elite == request.genomes[4] and ga.elite_score == 4.0


def test_model_must_fit_the_env_before_anything_is_built() -> None:
    with pytest.raises(ConfigError, match=r"model\.name: 'mlp' must be nature_large or nature_"):
        load_config(None, [*BUDGET, "model.name=mlp"])
    with pytest.raises(ConfigError, match=r"model\.output: 'argmax' must be tanh, clip or null"):
        load_config(None, [*BUDGET, "env.kind=mujoco", "model.name=mlp", "model.output=argmax"])
    # A gym id may give either: nothing to check until the env exists.
    load_config(None, [*BUDGET, "env.kind=gym", "env.id=CartPole-v1", "model.name=mlp"])


@pytest.mark.parametrize(
    "module",
    [
        neuroevo.envs,
        neuroevo.models,
        neuroevo.algorithms,
        neuroevo.algorithms.fitness_loop,
        neuroevo.evaluation.evaluator,
    ],
    ids=lambda m: m.__name__,
)
def test_docstring_examples_run(module) -> None:
    failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert attempted > 0 and failed == 0


def _code_blocks(text: str, first_line: str) -> list[str]:
    """The fenced blocks of ``docs/ARCHITECTURE.md`` that start with ``first_line``."""
    blocks = re.findall(r"```\w+\n(" + re.escape(first_line) + r".*?)```", text, re.S)
    assert blocks, first_line
    return blocks


def _write_worked_examples(root: Path) -> tuple[str, Path]:
    """Writes the docs' worked examples into package ``my_neuroevo`` under ``root``; returns
    their registration lines and the config."""
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    package = root / "my_neuroevo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in ("tiny", "point", "hill"):
        (block,) = _code_blocks(doc, f"# my_neuroevo/{name}.py\n")
        (package / f"{name}.py").write_text(block)
    (config,) = _code_blocks(doc, "# my_neuroevo/point.yaml\n")
    (package / "point.yaml").write_text(config)
    registrations = _code_blocks(doc, "from neuroevo.")
    registrations = [b for b in registrations if ".register(" in b]
    # An import and a register call each (ruff's formatter puts a blank line between them).
    assert len(registrations) == 3
    assert all(len([line for line in b.splitlines() if line.strip()]) == 2 for b in registrations)
    return "".join(registrations), package / "point.yaml"


def _train(root: Path, config: Path, run_dir: Path, before: str = "") -> subprocess.Popen:
    script = f"""
import sys
{before}
from neuroevo.cli import train
sys.exit(train.main([
    "--config", {str(config)!r}, "--run-dir", {str(run_dir)!r}, "--quiet",
    "--set", "noise.cache_dir={root}", "--set", "evaluator.workers=1",
]))
"""
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=f"{root}{os.pathsep}{ROOT}"),
        cwd=root,
        check=False,
    )


def test_the_worked_examples_train_from_a_yaml_config(tmp_path: Path) -> None:
    """docs/ARCHITECTURE.md's toy model, env kind and optimizer, each one file plus its
    registration line, train one generation from the doc's YAML config and checkpoint the
    optimizer's state, touching no file of neuroevo."""
    registrations, config = _write_worked_examples(tmp_path)
    run_dir = tmp_path / "run"
    done = _train(tmp_path, config, run_dir, before=registrations)
    assert done.returncode == 0, done.stderr
    with (run_dir / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [row["generation"] for row in rows] == ["0"]
    assert float(rows[0]["best"]) < 0  # minus a distance
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["model"]["tiny"] == {"width": 4} and "mlp" not in saved["model"]
    assert saved["env"]["point"] == {"speed": 0.1}
    assert saved["algorithm"]["hill"]["sigma"] == 0.1
    (ckpt,) = (run_dir / "checkpoints").glob("ckpt-*")
    state = yaml.safe_load((ckpt / "state.yaml").read_text())["optimizer"]
    assert state["algorithm"] == "hill" and state["generation"] == 1


def test_components_register_as_entry_points(tmp_path: Path) -> None:
    """Declared as entry points of an installed package, the worked examples need no code
    run before ``python -m neuroevo.train``."""
    _, config = _write_worked_examples(tmp_path)
    dist_info = tmp_path / "my_neuroevo-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-neuroevo\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(
        "[neuroevo.models]\ntiny = my_neuroevo.tiny:TinyMLP\n"
        "[neuroevo.envs]\npoint = my_neuroevo.point:PointEnv\n"
        "[neuroevo.algorithms]\nhill = my_neuroevo.hill:HillClimber\n"
    )
    done = _train(tmp_path, config, tmp_path / "run")
    assert done.returncode == 0, done.stderr


def test_resuming_a_run_with_old_key_names_says_how_to_fix_it(tmp_path: Path) -> None:
    from neuroevo.cli import train

    (tmp_path / "config.yaml").write_text(
        "algorithm:\n  ga: {population: 10, truncation: 2}\nbudget: {generations: 1}\n"
    )
    args = train._parser().parse_args(["--resume", str(tmp_path)])
    with pytest.raises(ValueError) as info:
        train.resolve(args)
    message = str(info.value)
    assert f"cannot read {tmp_path / 'config.yaml'}, written by another neuroevo version" in message
    assert "'algorithm.ga.population' was renamed to 'algorithm.ga.population_size'" in message


def _own_includes(sources: tuple[str, ...], root: Path) -> set[str]:
    """Every file of ``root`` (custom_ops/) that ``sources`` include, transitively, with them."""
    found, pending = set(), list(sources)
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found.add(name)
        text = (root / name).read_text()
        pending += [i for i in re.findall(r'#include "([^"]+)"', text) if (root / i).is_file()]
    return found


def test_the_wheel_holds_no_benchmark_code(tmp_path: Path) -> None:
    """The wheel ships every production op source (and the headers they include) and no
    benchmark: neither benchmarks/ nor the sources of the bench- and test-only op libraries.
    Installed, it lists those libraries as not installed and refuses to build them with a
    clear error, while every production library's build key is computed from its sources."""
    import shutil
    import zipfile

    from neuroevo.ops.build import LIBRARIES

    source = tmp_path / "src"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", ".*cache*", "runs"),
    )
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    built = subprocess.run(
        [*pip_wheel, "-q", "-w", str(tmp_path), str(source)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("neuroevo-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "neuroevo/config/schema.py" in names
    assert [n for n in names if "bench" in n or "testing" in n] == []
    assert "neuroevo/envs/assets/humanoid_trap.xml" in names  # and its licence:
    assert "neuroevo/envs/assets/LICENSE-deep-neuroevolution.txt" in names
    shipped = {n.removeprefix("neuroevo/_csrc/") for n in names if n.startswith("neuroevo/_csrc/")}
    for name, spec in LIBRARIES.items():
        if spec.purpose == "production":
            needed = _own_includes(spec.sources, ROOT / "custom_ops")
            assert needed <= shipped, (name, needed - shipped)
        else:
            assert not set(spec.sources) & shipped, name

    installed = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(installed)
    probe = """
import sys
from neuroevo.cli import doctor
from neuroevo.ops import build
print(build.source_dir())
for name, spec in build.LIBRARIES.items():
    if spec.purpose == "production":
        assert build.sources_installed(name), name
        print(name, build.library_key(name)[0])
    else:
        assert not build.sources_installed(name), name
        try:
            build.build_library(name)
        except build.OpBuildError as exc:
            print(name, "refused:", exc)
print("doctor:")
sys.exit(doctor.main([]))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=dict(
            os.environ,
            PYTHONPATH=str(installed),
            NEUROEVO_CACHE=str(tmp_path / "cache"),
            TF_CPP_MIN_LOG_LEVEL="2",
        ),
        cwd=tmp_path,  # not the checkout, whose neuroevo would shadow the installed one
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    probed, report = done.stdout.split("doctor:\n")
    assert probed.splitlines()[0] == str(installed / "neuroevo" / "_csrc")
    for name, spec in LIBRARIES.items():
        (line,) = [x for x in probed.splitlines()[1:] if x.split()[0] == name]
        if spec.purpose != "production":
            assert f"is for {spec.purpose}s only" in line and "not in the wheel" in line
        (line,) = [x for x in report.splitlines() if x.split()[2:3] == [name]]
        assert ("not installed" in line) == (spec.purpose != "production"), line
    assert not (tmp_path / "cache").exists()  # nothing was compiled


def test_the_reference_batch_is_a_seeded_random_action_stream() -> None:
    from neuroevo.run.build import REFERENCE_BATCH_SIZE, build_env, draw_reference_batch

    cfg = load_config(None, [*BUDGET, "env.kind=gym", "env.id=CartPole-v1", "model.name=mlp"])
    batches = [
        draw_reference_batch(seed, build_env(cfg, slots))
        for seed, slots in ((3, 3), (3, 1), (4, 1))
    ]
    assert batches[0].shape == (REFERENCE_BATCH_SIZE, 4)
    # Random actions end CartPole episodes after ~20 steps: 128 observations span several.
    assert len(np.unique(batches[0][:, 0])) > 100 and np.ptp(batches[0], axis=0).min() > 0
    np.testing.assert_array_equal(batches[0], batches[1])  # any env size, the same batch
    assert not np.array_equal(batches[0], batches[2])  # another run seed, another batch
