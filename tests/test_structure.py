"""The shape of the package: imports flow one way through the layers of
docs/ARCHITECTURE.md (no circle, no arrow back up), the spine from an entry point down to the
leaves is short, the root holds only the entry points, and no module is a god file.

The graph is read with ``ast`` from every ``import`` of ``neuroevo/`` (inside functions too:
a lazy import is still a dependency); ``from package import name`` counts as an import of the
submodule when ``name`` is one.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "neuroevo"
MAX_LINES = 600
MAX_ROOT_MODULES = 8
MAX_FLOORS = 10

LAYERS = (
    (
        "entry points",
        (
            "__init__",
            "train",
            "play",
            "evaluate",
            "plot",
            "doctor",
            "sweep",
            "api",
            "cli",
            "sweeps",
        ),
    ),
    ("a run", ("run",)),
    ("config", ("config",)),
    ("algorithms, evaluation, trackers", ("algorithms", "evaluation", "loggers")),
    ("models, envs", ("models", "envs", "compat")),
    ("ops", ("ops",)),
    ("genomes", ("genomes",)),
    ("core", ("core",)),
)
"""Top to bottom; a module may import its own layer or any below. Every subpackage and root
module is named here (``__init__`` is the package itself)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def import_graph() -> dict[str, set[str]]:
    """Module -> the neuroevo modules it imports."""
    known = modules()
    graph = {}
    for name, path in known.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.add(sub if sub in known else node.module)
        graph[name] = {t for t in targets if t in known and t != name}
    return graph


def unit(module: str) -> str:
    """The subpackage or root module a module belongs to (``__init__`` for the package)."""
    return module.split(".")[1] if "." in module else "__init__"


def layer(module: str) -> int:
    """0 for the top layer; len(LAYERS) for a module no layer names."""
    for index, (_, members) in enumerate(LAYERS):
        if unit(module) in members:
            return index
    return len(LAYERS)


def floors(graph: dict[str, set[str]]) -> list[str]:
    """The longest chain of imports of an acyclic graph, counted in floors: a step from one
    subpackage or root module to another goes down a floor, a step inside a subpackage does
    not (its modules are one floor of the architecture). Returns the floors passed, top first.
    """
    best: dict[str, list[str]] = {}

    def down(module: str) -> list[str]:
        if module not in best:
            chain = [unit(module)]
            for target in sorted(graph[module]):
                below = down(target)
                step = below if below[0] == unit(module) else [unit(module), *below]
                if len(step) > len(chain):
                    chain = step
            best[module] = chain
        return best[module]

    return max((down(module) for module in sorted(graph)), key=len)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def arrows_back_up(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if layer(target) < layer(source)
    )


def test_the_checks_see_a_circle_and_an_arrow_back_up() -> None:
    """The checks themselves, on a graph with one of each."""
    graph = {
        "neuroevo.train": {"neuroevo.run.trainer"},
        "neuroevo.run.trainer": {"neuroevo.evaluate", "neuroevo.genomes.noise"},
        "neuroevo.evaluate": {"neuroevo.train"},
        "neuroevo.genomes.noise": set(),
    }
    assert circles(graph) == [["neuroevo.evaluate", "neuroevo.run.trainer", "neuroevo.train"]]
    assert arrows_back_up(graph) == ["neuroevo.run.trainer -> neuroevo.evaluate"]
    assert layer("neuroevo.evaluation.ray.driver") == 3 and layer("neuroevo.genomes.genome") == 6
    assert layer("neuroevo.nowhere") == len(LAYERS)


def test_floors_count_a_subpackage_once() -> None:
    graph = {
        "neuroevo.train": {"neuroevo.cli.train"},
        "neuroevo.cli.train": {"neuroevo.cli.common", "neuroevo.run.trainer"},
        "neuroevo.cli.common": {"neuroevo.core.files"},
        "neuroevo.run.trainer": {"neuroevo.run.assemble"},
        "neuroevo.run.assemble": {"neuroevo.core.files"},
        "neuroevo.core.files": set(),
    }
    assert floors(graph) == ["train", "cli", "run", "core"]


def test_every_package_and_root_module_is_placed_in_a_layer() -> None:
    """A new subpackage or root module must be given its layer here."""
    assert {name for name in modules() if layer(name) == len(LAYERS)} == set()


def test_the_root_holds_only_the_entry_points() -> None:
    """``neuroevo/`` itself holds the package, the ``python -m`` entry modules and the short
    API; everything else lives in a subpackage that says what it is."""
    assert len(list(PACKAGE.glob("*.py"))) <= MAX_ROOT_MODULES


def test_the_spine_is_short() -> None:
    """From an entry point down to the leaves, a chain of imports passes at most
    ``MAX_FLOORS`` subpackages and root modules."""
    chain = floors(import_graph())
    assert len(chain) <= MAX_FLOORS, " -> ".join(chain)


def test_train_is_a_function_and_a_command() -> None:
    """``ne.train`` is :func:`neuroevo.api.train`; ``python -m neuroevo.train`` runs the
    command, and importing the entry module (which would shadow the function) is refused."""
    import neuroevo as ne
    from neuroevo import api

    assert ne.train is api.train
    code = (
        "import neuroevo\n"
        "try:\n    import neuroevo.train\nexcept ImportError as e:\n    print(e)\n"
        "print(neuroevo.train.__module__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.splitlines() == [
        "neuroevo.train is run with python -m; import neuroevo.cli.train instead",
        "neuroevo.api",
    ], done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "neuroevo.train", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "--resume" in done.stdout, done.stderr


def test_imports_have_no_circle() -> None:
    assert circles(import_graph()) == []


def test_imports_never_point_back_up() -> None:
    assert arrows_back_up(import_graph()) == []


def test_test_folders_mirror_the_package() -> None:
    """Tests of a subpackage live in the folder of its name (``bench/`` for ``benchmarks/``);
    only what spans the package (the short API, the shipped configs, the notebooks, this file)
    and the shared helpers stay at the top of ``tests/``."""
    tests = Path(__file__).resolve().parent
    folders = {p.name for p in tests.iterdir() if p.is_dir() and list(p.glob("test_*.py"))}
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders <= packages | {"bench"}
    assert {p.name for p in tests.glob("test_*.py")} == {
        "test_api.py",
        "test_notebook.py",
        "test_shipped_configs.py",
        "test_structure.py",
    }


def test_no_module_exceeds_the_line_budget() -> None:
    long = {
        name: count
        for name, path in modules().items()
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
