"""The shape of the package: imports flow one way through the layers of
docs/ARCHITECTURE.md (no circle, no arrow back up), and no module is a god file.

The graph is read with ``ast`` from every ``import`` of ``neuroevo/`` (inside functions too:
a lazy import is still a dependency); ``from package import name`` counts as an import of the
submodule when ``name`` is one.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "neuroevo"
MAX_LINES = 600

LAYERS = (
    ("entry points", ("train", "play", "evaluate", "plot", "doctor", "__main__", "api")),
    (
        "assembly",
        (
            "trainer",
            "assemble",
            "policy",
            "paper_test",
            "config",
            "runlog",
            "loggers",
            "preflight",
        ),
    ),
    ("algorithms, evaluation", ("algorithms", "evaluation")),
    ("models, envs", ("models", "envs", "compat")),
    ("ops", ("ops",)),
)
"""Top to bottom; a module may import its own layer or any below. Every module not named here
is a leaf (noise, genome, params, registry, checkpoint, ...), which imports only leaves."""


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


def layer(module: str) -> int:
    """0 for the top layer, len(LAYERS) for the leaves."""
    first = module.split(".")[1] if "." in module else ""
    for index, (_, members) in enumerate(LAYERS):
        if first in members:
            return index
    return len(LAYERS)


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
        "neuroevo.train": {"neuroevo.trainer"},
        "neuroevo.trainer": {"neuroevo.evaluate", "neuroevo.noise"},
        "neuroevo.evaluate": {"neuroevo.train"},
        "neuroevo.noise": set(),
    }
    assert circles(graph) == [["neuroevo.evaluate", "neuroevo.train", "neuroevo.trainer"]]
    assert arrows_back_up(graph) == ["neuroevo.trainer -> neuroevo.evaluate"]
    assert layer("neuroevo.evaluation.ray.driver") == 2 and layer("neuroevo.genome") == 5


def test_every_package_is_placed_in_a_layer() -> None:
    """A new subpackage must be given its layer here (a leaf package would be a surprise)."""
    packages = {
        path.relative_to(PACKAGE).parts[0]
        for path in PACKAGE.rglob("__init__.py")
        if path.parent != PACKAGE
    }
    placed = {member for _, members in LAYERS for member in members}
    assert packages <= placed


def test_imports_have_no_circle() -> None:
    assert circles(import_graph()) == []


def test_imports_never_point_back_up() -> None:
    assert arrows_back_up(import_graph()) == []


def test_no_module_exceeds_the_line_budget() -> None:
    long = {
        name: count
        for name, path in modules().items()
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
