"""IPOP and BIPOP restarts around the CMA-type strategies: the schedules of Auger & Hansen
(2005) and Hansen (2009, pycma's bookkeeping), exact resume in the middle of a restart, and
10-D Rastrigin, which a single default-population run does not solve and restarts do (the
success rate against pycma's restarts over 20 seeds is docs/STRATEGIES.md's, from
``python -m benchmarks restarts``)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from test_algorithms import run, through_yaml_and_npz

from benchmarks.restarts import neuroevo_run
from neuroevo.algorithms import make_algorithm
from neuroevo.genomes.noise import NoiseTable


@pytest.fixture(scope="module")
def noise() -> NoiseTable:
    return NoiseTable(seed=0, size=1_000_000, cache_dir=False)


def quick_restarts(name: str, kind: str, noise: NoiseTable, **params):
    """A 3-D optimizer whose runs converge within a few generations (tol_x = 0.05), so that
    a few dozen generations span several restarts."""
    return make_algorithm(
        name,
        num_params=3,
        scales=1.0,
        noise=noise,
        seed=4,
        population_size=6,
        sigma=0.5,
        restarts={"kind": kind, "tol_x": 0.05, "max_restarts": 3},
        **params,
    )


def test_ipop_doubles_the_population_and_resets_sigma(noise: NoiseTable) -> None:
    ipop = quick_restarts("cma_es", "ipop", noise, center_episodes=0)
    summaries = run(ipop, generations=120)
    runs = {}
    for summary in summaries:  # the first generation of each run has its initial sigma
        runs.setdefault(int(summary.extras["restart"]), summary)
    assert sorted(runs) == [0, 1, 2, 3]  # max_restarts = 3, then the last run goes on
    assert [runs[r].extras["population"] for r in range(4)] == [6, 12, 24, 48]
    assert all(runs[r].sigma == 0.5 for r in range(4))


def test_bipop_interleaves_small_runs_by_budget(noise: NoiseTable) -> None:
    """Hansen 2009 as pycma's fmin runs it: the first run counts as small; then a large run
    (lambda_0 2^k at the k-th) when the small runs have spent at least as many evaluations as
    the large ones, else a small run with lambda_0 <= lambda <= lambda_0 2^k, sigma in
    [0.01 sigma_0, sigma_0] and at most half the large runs' evaluations."""
    bipop = quick_restarts("sep_cma_es", "bipop", noise, center_episodes=0)
    small_runs = large_runs = 0
    for _ in range(600):
        before = bipop._state
        run(bipop, generations=1)
        after = bipop._state
        if after.restart == before.restart:
            continue
        spent = (before.run_generations + 1) * before.population_size
        small = before.small_evaluations + (spent if before.small else 0)
        large = before.large_evaluations + (0 if before.small else spent)
        assert (after.small_evaluations, after.large_evaluations) == (small, large)
        if small < max(1, large):
            small_runs += 1
            assert after.small and 6 <= after.population_size <= 6 * 2**before.large_runs
            assert 0.005 <= after.sigma <= 0.5 and after.large_runs == before.large_runs
            assert after.max_run_generations == max(1, int(0.5 * large / after.population_size))
        else:
            large_runs += 1
            assert not after.small and after.large_runs == before.large_runs + 1
            assert after.population_size == 6 * 2**after.large_runs and after.sigma == 0.5
    assert large_runs == 3 and small_runs >= 2


@pytest.mark.parametrize(("name", "kind"), [("cma_es", "ipop"), ("lm_ma_es", "bipop")])
@pytest.mark.parametrize("stop_after", [7, 30, 61])  # tells: mid-run, mid-phase, later runs
def test_resume_in_the_middle_of_restarts_is_exact(
    name: str, kind: str, stop_after: int, noise: NoiseTable
) -> None:
    uninterrupted = quick_restarts(name, kind, noise)
    expected = run(uninterrupted, generations=60)
    assert expected[-1].extras["restart"] >= 2
    first = quick_restarts(name, kind, noise)
    before = run(first, phases=stop_after)
    resumed = quick_restarts(name, kind, noise)
    resumed.load_state_dict(through_yaml_and_npz(first.state_dict()))
    after = run(resumed, generations=60 - len(before))
    assert before + after == expected
    np.testing.assert_array_equal(
        resumed.decoder.decode(resumed.elite), uninterrupted.decoder.decode(uninterrupted.elite)
    )


def test_a_checkpoint_without_restarts_does_not_load_into_one_with(noise: NoiseTable) -> None:
    plain = make_algorithm("cma_es", num_params=3, scales=1.0, noise=noise, seed=4)
    with pytest.raises(ValueError, match="restart"):
        quick_restarts("cma_es", "ipop", noise).load_state_dict(plain.state_dict())


def test_restarts_solve_10d_rastrigin_where_one_run_does_not() -> None:
    """Seed 0 from sigma0 = 2 and lambda = 10: one run ends in a local optimum; IPOP finds the
    global one after 5 restarts (87k evaluations; pycma's IPOP: 88k), BIPOP too."""
    assert neuroevo_run("cma_es", "none", 0, 30_000)[0] is False
    solved, evaluations, runs = neuroevo_run("cma_es", "ipop", 0, 150_000)
    assert solved and runs >= 3, (evaluations, runs)
    solved, evaluations, runs = neuroevo_run("sep_cma_es", "bipop", 0, 150_000)
    assert solved and runs >= 3, (evaluations, runs)


@pytest.mark.slow
def test_a_training_run_resumes_exactly_after_sigkill_mid_restarts(tmp_path, rng) -> None:
    """IPOP on the shortened maze of test_train_cli, restarting after every generation (tol_x
    above sigma): killed after its first checkpoint, the resumed run logs what an
    uninterrupted one does, restarts and populations included."""
    from run_helpers import search_rows, tiny_maze_config, train_and_kill

    from neuroevo.config.schema import load_config
    from neuroevo.run.plan import plan
    from neuroevo.run.trainer import open_run

    path = tiny_maze_config(tmp_path, "cma_es")
    config = yaml.safe_load(path.read_text())
    config["algorithm"]["cma_es"]["restarts"] = {"kind": "ipop", "tol_x": 1.0, "max_restarts": 2}
    path.write_text(yaml.safe_dump(config))
    reference = tmp_path / "reference"
    open_run(plan(load_config(path), reference), quiet=True).train()
    rows = search_rows(reference)
    assert [r["population"] for r in rows] == ["8.0", "16.0", "32.0", "32.0"]
    killed = tmp_path / "killed"
    train_and_kill(["--config", str(path), "--quiet"], killed, 1, rng.uniform(0.0, 1.0))
    open_run(plan(load_config(killed / "config.yaml"), killed, resume=True), quiet=True).train()
    assert search_rows(killed) == rows
