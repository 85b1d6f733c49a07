"""``python -m benchmarks restarts``: IPOP and BIPOP restarts on 10-D Rastrigin, neuroevo's
wrapper against pycma's ``fmin`` restarts, success rate over seeds.

Both minimise Rastrigin with its optimum at 1 from a new random start per run (x0 ~ N(0, 2^2 I)
per coordinate: the model initialisation ``scales * eps`` here, ``2 * randn`` for pycma),
sigma0 = 2, default lambda = 10, positive weights only (``CMA_active: False``), stopping at
f < 1e-8 (success) or after ``--budget`` evaluations. pycma's restarts use its full set of
stopping rules; neuroevo's use ``tol_fun`` and ``tol_x`` (docs/STRATEGIES.md says why).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from benchmarks.common import print_table

DIMS, SIGMA0, TARGET = 10, 2.0, 1e-8


def rastrigin(x: np.ndarray) -> np.ndarray:
    """float64 [n]: Rastrigin with optimum 0 at 1, for each row of ``x`` [n, d]."""
    y = x - 1
    return 10 * x.shape[1] + np.sum(y**2 - 10 * np.cos(2 * np.pi * y), axis=1)


def neuroevo_run(strategy: str, kind: str, seed: int, budget: int) -> tuple[bool, int, int]:
    """(solved, evaluations, runs) of one neuroevo run with restarts of ``kind`` (``none``:
    one run)."""
    from neuroevo.algorithms import make_algorithm
    from neuroevo.genomes.noise import NoiseTable

    noise = NoiseTable(seed=5, size=1_000_000, cache_dir=False)
    algorithm = make_algorithm(
        strategy,
        num_params=DIMS,
        scales=SIGMA0,
        noise=noise,
        seed=seed,
        population_size=10,
        sigma=SIGMA0,
        center_episodes=0,
        restarts={"kind": kind},
    )
    evaluations, restart = 0, 0
    while evaluations < budget:
        request = algorithm.ask()
        x = algorithm.decoder.decode_batch(request.genomes).astype(np.float64)
        values = rastrigin(x)
        summary = algorithm.tell(request, -values[:, None])
        evaluations += len(x)
        restart = int(summary.extras.get("restart", 0))  # no restarts: always the first run
        if values.min() < TARGET:
            return True, evaluations, restart + 1
    return False, evaluations, restart + 1


def pycma_run(kind: str, seed: int, budget: int) -> tuple[bool, int, int]:
    """(solved, evaluations, runs) of one pycma ``fmin2`` with restarts."""
    import cma

    rng = np.random.default_rng(seed)
    options = {
        "CMA_active": False,
        "popsize": 10,
        "seed": seed + 1,
        "verbose": -9,
        "ftarget": TARGET,
        "maxfevals": budget,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, es = cma.fmin2(
            lambda x: float(rastrigin(np.asarray(x)[None])[0]),
            lambda: SIGMA0 * rng.standard_normal(DIMS),
            SIGMA0,
            options,
            restarts=9,
            bipop=kind == "bipop",
        )
    solved = es.best.f < TARGET
    return bool(solved), int(es.best.evals if solved else es.countevals), len(es.all_best) - 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks restarts", description=__doc__)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=200_000, help="evaluations per seed")
    parser.add_argument(
        "--methods",
        default="cma_es:ipop,cma_es:bipop,sep_cma_es:ipop,lm_ma_es:ipop,pycma:ipop,pycma:bipop",
    )
    args = parser.parse_args(argv)
    rows = []
    for method in args.methods.split(","):
        strategy, kind = method.split(":")
        results = []
        for seed in range(args.seeds):
            if strategy == "pycma":
                results.append(pycma_run(kind, seed, args.budget))
            else:
                results.append(neuroevo_run(strategy, kind, seed, args.budget))
            print(method, seed, results[-1], flush=True)
        solved = [evals for ok, evals, _ in results if ok]
        rows.append(
            [
                method,
                f"{len(solved)}/{args.seeds}",
                np.median(solved) if solved else float("nan"),
                np.mean([runs for _, _, runs in results]),
            ]
        )
    print_table(
        f"10-D Rastrigin, budget {args.budget} evaluations",
        ["method", "solved", "median evals (solved)", "mean runs"],
        rows,
    )
    return 0
