"""The deceptive hard maze, shortened: novelty search explores where reward-only ES does not.

Both algorithms get the same evaluations (same population, generations and network). The
reward (minus the distance to the goal) pulls ES into the trap below the goal; NS-ES spreads
its final positions over the maze. The statistic is the number of 20 x 20 cells of the map
holding a final position of some evaluated episode, summed over two seeds per algorithm.
"""

from __future__ import annotations

import numpy as np
import pytest

from neuroevo.algorithms import make_algorithm
from neuroevo.envs import make_env
from neuroevo.evaluation import Evaluator
from neuroevo.models import make_model
from neuroevo.noise import NoiseTable

POPULATION = 40
GENERATIONS = 12
CELL = 20.0


@pytest.fixture(scope="module")
def maze():
    env = make_env("maze", "hard", POPULATION + 4)
    model = make_model(
        "mlp", env.num_slots, env.observation_spec, env.action_spec, hidden_sizes=[16]
    )
    yield env, model, NoiseTable(seed=0, size=1_000_000, cache_dir=False)
    env.close()


def explored_cells(maze, name: str, seed: int) -> int:
    env, model, noise = maze
    hyper = {"population_size": POPULATION, "sigma": 0.1, "learning_rate": 0.05}
    if name != "es":
        hyper |= {"meta_population": 3}
    algorithm = make_algorithm(
        name,
        num_params=model.num_params,
        scales=model.init_scales(),
        noise=noise,
        seed=seed,
        **hyper,
    )
    cells = set()
    with Evaluator(env, model, algorithm.decoder.decode_batch, workers=1) as evaluator:
        while algorithm.generation < GENERATIONS:
            request = algorithm.ask()
            results = evaluator.evaluate(
                request.genomes, request.episodes_per_genome, request.episode_seeds
            )
            final = results.behavior.reshape(-1, 2)
            cells |= {tuple(c) for c in np.floor(final / CELL).astype(int).tolist()}
            algorithm.tell(request, results.returns, results.behavior)
    return len(cells)


def test_novelty_search_explores_the_maze_where_es_is_trapped(maze) -> None:
    novelty = sum(explored_cells(maze, "ns_es", seed) for seed in (1, 2))
    reward_only = sum(explored_cells(maze, "es", seed) for seed in (1, 2))
    assert novelty >= 1.5 * reward_only, (novelty, reward_only)
