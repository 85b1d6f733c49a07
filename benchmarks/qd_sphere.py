"""``python -m benchmarks qd_sphere``: the sphere with linear projection, the standard
quality-diversity benchmark (Fontaine et al. 2020, Section 4, arXiv:1912.02400; the setup of
Fontaine & Nikolaidis 2023, arXiv:2205.10752, as pyribs' ``examples/sphere.py`` runs it).

100-D solutions; the objective is the sphere with its optimum moved to ``x_i = 2.048``
(``0.4 * 5.12``), normalised to [0, 100] (100 at the optimum, 0 at ``x_i = -5.12``); the two
measures are the sums of the first and of the last 50 values, each value outside [-5.12, 5.12]
first folded back as ``5.12 / x_i``; a 100 x 100 grid over [-256, 256]^2 (``50 * 5.12`` per
side). Every method evaluates 540 solutions per iteration, starting from ``x = 0``:

- MAP-Elites: Gaussian mutation sigma 0.5 (generation 0: ``N(0, 0.5^2)``);
- MAP-Elites (line): iso-line variation, sigma_iso 0.5, sigma_line 0.2;
- CMA-ME: 15 improvement emitters of 36, sigma0 0.5;
- CMA-MAE: 15 emitters of 36, sigma0 0.5, alpha 0.01, threshold_min 0.

Reported: QD score (sum of the elites' objectives, over the 10,000 cells: percent of the best
possible) and coverage, per seed and their mean, through ``ne.optimize`` with ``measures=``
and ``archive=``. Writes ``--json`` and the table into ``--markdown`` between the
``<!-- qd_sphere:begin -->`` / ``<!-- qd_sphere:end -->`` markers. Each finished run is kept
in ``--json``'s directory and not run again, so an interrupted benchmark resumes.

``--pyribs`` runs every method also with pyribs (``pip install ribs``; the QD library of the
CMA-ME and CMA-MAE authors), an independent implementation with the same settings, and writes
the two side by side between the ``qd_sphere_pyribs`` markers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

import neuroevo as ne
from benchmarks.common import REPO_ROOT, print_table, write_json

DIMS = 100
BOUND = 5.12
SHIFT = 0.4 * BOUND
MEASURE_RANGE = DIMS / 2 * BOUND
BATCH = 540
GRID = {"dims": [100, 100], "ranges": [[-MEASURE_RANGE, MEASURE_RANGE]] * 2}
METHODS: dict[str, tuple[str, float, dict[str, Any]]] = {
    # name: (algorithm, init_std, hyperparameters)
    "MAP-Elites": ("map_elites", 0.5, {"mutation_sigma": 0.5}),
    "MAP-Elites (line)": ("map_elites", 0.5, {"mutation_sigma": 0.5, "line_sigma": 0.2}),
    "CMA-ME": ("cma_me", 0.0, {"emitters": 15, "sigma": 0.5}),
    "CMA-MAE": (
        "cma_mae",
        0.0,
        {"emitters": 15, "sigma": 0.5, "archive_learning_rate": 0.01, "threshold_min": 0.0},
    ),
}
MARKERS = ("<!-- qd_sphere:begin -->", "<!-- qd_sphere:end -->")
PYRIBS_MARKERS = ("<!-- qd_sphere_pyribs:begin -->", "<!-- qd_sphere_pyribs:end -->")


def sphere(x: np.ndarray) -> np.ndarray:
    """float64 [n]: the shifted sphere of rows ``x`` [n, DIMS], normalised to [0, 100]."""
    worst = (-BOUND - SHIFT) ** 2 * DIMS
    return (np.sum((x - SHIFT) ** 2, axis=1) - worst) / -worst * 100


def measures(x: np.ndarray) -> np.ndarray:
    """float64 [n, 2]: the sums of the two halves of ``x``, values outside the bounds folded
    back as ``BOUND / x``."""
    folded = np.array(x, np.float64)
    outside = np.abs(folded) > BOUND
    folded[outside] = BOUND / folded[outside]
    half = DIMS // 2
    return np.stack([folded[:, :half].sum(axis=1), folded[:, half:].sum(axis=1)], axis=1)


def run(method: str, seed: int, iterations: int) -> dict[str, Any]:
    """One run of ``method``; its final QD score (percent), coverage and wall time."""
    algorithm, init_std, hyperparams = METHODS[method]
    start = time.perf_counter()
    result = ne.optimize(
        sphere,
        DIMS,
        algorithm,
        measures=measures,
        archive=GRID,
        generations=iterations,
        init_std=init_std,
        seed=seed,
        population_size=BATCH,
        **hyperparams,
    )
    archive = result.archive
    assert archive is not None
    return {
        "qd_score": archive.qd_score / archive.fitness.size,  # objectives are out of 100
        "coverage": 100 * archive.coverage,
        "best": float(np.nanmax(archive.fitness)),
        "seconds": time.perf_counter() - start,
    }


def run_pyribs(method: str, seed: int, iterations: int) -> dict[str, Any]:
    """The same run with pyribs' archive, emitters and scheduler (CMA-MAE: its ``imp``
    ranker, ``mu`` selection, ``basic`` restarts and a result archive of the best per cell;
    CMA-ME: ``2imp``, ``filter``, ``no_improvement``)."""
    from ribs.archives import GridArchive
    from ribs.emitters import EvolutionStrategyEmitter, GaussianEmitter, IsoLineEmitter
    from ribs.schedulers import Scheduler

    grid = {"solution_dim": DIMS, "dims": GRID["dims"], "ranges": GRID["ranges"]}
    x0 = np.zeros(DIMS)
    archive = best = GridArchive(**grid, seed=seed)
    if method == "CMA-MAE":
        archive = GridArchive(**grid, learning_rate=0.01, threshold_min=0.0, seed=seed)
    if method in ("CMA-ME", "CMA-MAE"):
        rules = (
            ("imp", "mu", "basic") if method == "CMA-MAE" else ("2imp", "filter", "no_improvement")
        )
        emitters = [
            EvolutionStrategyEmitter(
                archive, x0=x0, sigma0=0.5, ranker=rules[0], selection_rule=rules[1],
                restart_rule=rules[2], batch_size=36, seed=seed * 15 + i,
            )
            for i in range(15)
        ]  # fmt: skip
    elif method == "MAP-Elites":
        emitters = [GaussianEmitter(archive, sigma=0.5, x0=x0, batch_size=BATCH, seed=seed)]
    else:
        emitters = [
            IsoLineEmitter(
                archive, iso_sigma=0.5, line_sigma=0.2, x0=x0, batch_size=BATCH, seed=seed
            )
        ]
    scheduler = Scheduler(archive, emitters, result_archive=best if best is not archive else None)
    start = time.perf_counter()
    for _ in range(iterations):
        x = scheduler.ask()
        scheduler.tell(sphere(x), measures(x))
    return {
        "qd_score": float(best.stats.qd_score) / best.cells,
        "coverage": 100 * float(best.stats.coverage),
        "best": float(best.stats.obj_max),
        "seconds": time.perf_counter() - start,
    }


def markdown(payload: dict[str, Any]) -> str:
    """The table, with the command that produced it."""
    seeds, iterations = payload["seeds"], payload["iterations"]
    command = f"python -m benchmarks qd_sphere --iterations {iterations} --seeds {len(seeds)}"
    lines = [
        f"Measured by `{command}` on {payload['date']} (2 shared cores).",
        "",
        f"| 100-D sphere, linear projection, {iterations:,} iterations of 540 | QD score, % "
        "(mean; per seed) | coverage, % (mean; per seed) | best objective | minutes per run |",
        "|---|---|---|---|---|",
    ]
    for method, runs in payload["results"].items():
        qd = [r["qd_score"] for r in runs]
        coverage = [r["coverage"] for r in runs]
        lines.append(
            f"| {method} | {np.mean(qd):.2f}; {', '.join(f'{v:.2f}' for v in qd)} | "
            f"{np.mean(coverage):.2f}; {', '.join(f'{v:.2f}' for v in coverage)} | "
            f"{max(r['best'] for r in runs):.2f} | "
            f"{np.mean([r['seconds'] for r in runs]) / 60:.1f} |"
        )
    return "\n".join(lines)


def pyribs_markdown(payload: dict[str, Any]) -> str:
    """The side-by-side table of ``--pyribs``."""
    seeds, iterations = payload["seeds"], payload["iterations"]
    command = (
        f"python -m benchmarks qd_sphere --pyribs --iterations {iterations} --seeds "
        f"{len(seeds)} --methods '{payload['methods']}'"
    )
    lines = [
        f"Measured by `{command}` with pyribs {payload['pyribs']} on {payload['date']} (2 shared "
        "cores).",
        "",
        f"| {iterations:,} iterations of 540 | neuroevo QD score, % (per seed) | pyribs QD "
        "score, % | neuroevo coverage, % | pyribs coverage, % |",
        "|---|---|---|---|---|",
    ]
    for method, runs in payload["results"].items():
        cells = [
            ", ".join(f"{r[key]:.2f}" for r in runs[side])
            for key in ("qd_score", "coverage")
            for side in ("neuroevo", "pyribs")
        ]
        lines.append(f"| {method} | {' | '.join(cells)} |")
    return "\n".join(lines)


def write_markdown(path: Path, table: str, markers: tuple[str, str] = MARKERS) -> None:
    """Replaces the text between the ``markers`` of ``path`` with ``table``."""
    text = path.read_text()
    start, end = text.index(markers[0]) + len(markers[0]), text.index(markers[1])
    path.write_text(text[:start] + "\n" + table + "\n" + text[end:])
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks qd_sphere", description=__doc__)
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    parser.add_argument("--json", type=Path, default=Path("bench_results/qd_sphere.json"))
    parser.add_argument("--markdown", type=Path, default=REPO_ROOT / "docs/STRATEGIES.md")
    parser.add_argument("--pyribs", action="store_true", help="also run pyribs, side by side")
    args = parser.parse_args(argv)
    runs_dir = args.json.parent / "qd_sphere_runs"
    runs_dir.mkdir(parents=True, exist_ok=True)

    def runs(method: str, prefix: str, runner: Any) -> list[dict[str, Any]]:
        """``runner``'s runs of ``method`` over the seeds, finished ones read back."""
        done = []
        for seed in range(args.seeds):
            slug = METHODS[method][0] + ("_line" if "line" in method else "")
            path = runs_dir / f"{prefix}{slug}-{args.iterations}-{seed}.json"
            if not path.exists():
                path.write_text(json.dumps(runner(method, seed, args.iterations)))
            done.append(json.loads(path.read_text()))
            print(prefix + method, seed, done[-1], flush=True)
        return done

    methods = args.methods.split(",")
    if args.pyribs:
        import ribs

        both = {
            m: {"neuroevo": runs(m, "", run), "pyribs": runs(m, "pyribs-", run_pyribs)}
            for m in methods
        }
        payload = {
            "iterations": args.iterations,
            "seeds": list(range(args.seeds)),
            "methods": args.methods,
            "pyribs": ribs.__version__,
            "date": datetime.date.today().isoformat(),
            "results": both,
        }
        # Plain JSON: pyribs' environment need not have TensorFlow, which machine_info reads.
        args.json.with_name("qd_sphere_pyribs.json").write_text(json.dumps(payload, indent=2))
        write_markdown(args.markdown, pyribs_markdown(payload), PYRIBS_MARKERS)
        return 0
    results = {method: runs(method, "", run) for method in methods}
    rows = [
        [m, np.mean([r["qd_score"] for r in rs]), np.mean([r["coverage"] for r in rs])]
        for m, rs in results.items()
    ]
    print_table("sphere QD", ["method", "QD score %", "coverage %"], rows)
    payload = {
        "iterations": args.iterations,
        "seeds": list(range(args.seeds)),
        "date": datetime.date.today().isoformat(),
        "results": results,
    }
    write_json(args.json, payload)
    if set(results) == set(METHODS):
        write_markdown(args.markdown, markdown(payload))
    return 0
