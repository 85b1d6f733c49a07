"""The example notebooks run from top to bottom, at the small sizes they ship with.

They are committed without outputs, so none can go stale; each prints a last line that only a
complete run reaches.
"""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOKS = {
    "quickstart.ipynb": "gen 2",
    "custom_env_keras.ipynb": "custom env + keras: done",
    "lstm_memory.ipynb": "lstm memory: done",
    "novelty_maze.ipynb": "novelty maze: done",
    "ray_cluster.ipynb": "ray cluster: done",
    "sweep.ipynb": "sweep: done",
}


def test_every_notebook_is_listed_and_committed_without_outputs() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.ipynb")) == sorted(NOTEBOOKS)
    for name in NOTEBOOKS:
        notebook = nbformat.read(EXAMPLES / name, as_version=4)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert not any(cell.outputs or cell.execution_count for cell in code), name


# Starting a two-node Ray cluster alone takes tens of seconds, a Ray node and its trials too.
SLOW = {"ray_cluster.ipynb", "sweep.ipynb"}
NEEDS = {"ray_cluster.ipynb": "ray", "sweep.ipynb": "ray.tune"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(NOTEBOOKS)]
)
def test_notebook_runs(name: str, tmp_path) -> None:
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    notebook = nbformat.read(EXAMPLES / name, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert NOTEBOOKS[name] in text
