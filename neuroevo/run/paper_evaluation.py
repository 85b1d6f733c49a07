"""The papers' test of a policy: Such et al. 2017 play the elite for 200 episodes, each starting
with up to 30 random no-ops, and report mean / median / std / min / max.

Test episodes have their own seeds (from the run seed, never used by training) and run in a
separate env, so testing never changes the search. The trainer runs this test every
``test.every_generations`` and at the end (``test.at_end``); ``python -m neuroevo.evaluate``
runs it on demand.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from neuroevo.config.schema import Config, ConfigError, apply_overrides
from neuroevo.core.files import atomic_write
from neuroevo.core.resources import check_writable
from neuroevo.envs import ENV_KINDS
from neuroevo.run.policy import ElitePlayer, evaluate_elite, load_policy
from neuroevo.run.preflight import check_episodes
from neuroevo.run.run_dir import RunDir

TEST_SEED_STREAM = 0x7E57
"""Mixed with the run seed to draw test episode seeds (training uses other streams)."""


def episode_seeds_for_test(run_seed: int, episodes: int) -> np.ndarray:
    """int64 ``[episodes]``: the test episodes' seeds, fixed by the run seed."""
    rng = np.random.default_rng([run_seed, TEST_SEED_STREAM])
    return rng.integers(0, 2**31, size=episodes, dtype=np.int64)


def has_noop_starts(cfg: Config) -> bool:
    """Whether ``cfg``'s env kind starts episodes with random no-ops (``noop_starts``)."""
    return bool(ENV_KINDS.declared(cfg.env.kind, "noop_starts"))


def config_for_test(cfg: Config, noop_max: int | None, max_episode_steps: int | None) -> Config:
    """``cfg`` with the test's no-op starts (env kinds that have them, e.g. Atari; None: the
    run's ``test.noop_max``) and episode cutoff.

    Raises:
        ConfigError: ``noop_max`` given for an env without no-op starts, or a bad value.
    """
    overrides = [
        f"env.max_episode_steps={'null' if max_episode_steps is None else max_episode_steps}"
    ]
    kind = cfg.env.kind
    if noop_max is not None and not has_noop_starts(cfg):
        raise ConfigError(
            f"--noop-max applies to env kinds with no-op starts (Atari); this run's env is {kind}"
        )
    if has_noop_starts(cfg):
        overrides.append(
            f"env.{kind}.noop_max={cfg.test.noop_max if noop_max is None else noop_max}"
        )
    return apply_overrides(cfg, overrides)


def score(returns: np.ndarray) -> dict[str, float]:
    """Mean, median, std, min and max of the test returns."""
    return {
        "mean": float(np.mean(returns)),
        "median": float(np.median(returns)),
        "std": float(np.std(returns)),
        "min": float(np.min(returns)),
        "max": float(np.max(returns)),
    }


def run_test(
    run: RunDir,
    cfg: Config,
    episodes: int,
    noop_max: int | None,
    max_episode_steps: int | None,
    current: bool = False,
    player: ElitePlayer | None = None,
) -> dict[str, Any]:
    """Plays the run's best (or current) elite for ``episodes`` test episodes, each starting
    with up to ``noop_max`` random no-ops (env kinds with ``noop_starts``; None: the run's
    ``test.noop_max``), in ``player`` (built from :func:`config_for_test` of the same
    settings) or in an env and model built for this test.

    Writes the result to ``run.test_path`` (atomically) and returns it: the score
    (:func:`score`), the settings, the elite's genome record and every return.

    Raises:
        FileNotFoundError: The run has no saved elite yet.
        ValueError: Bad settings, an elite that does not fit the model or lacks its
            normalisation state, or a ``test.json`` that cannot be written (checked before
            any episode is played).
    """
    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")
    check_test_writable(run)
    check_episodes(episodes, "a test", "lower --episodes (or test.episodes)")
    tested = config_for_test(cfg, noop_max, max_episode_steps)
    genome, policy = load_policy(run, best=not current)
    seeds = episode_seeds_for_test(cfg.seed, episodes)
    if player is None:
        returns = evaluate_elite(tested, policy, seeds)
    else:
        returns = player.returns(policy, seeds)
    result = {
        **score(returns),
        "policy": "elite" if current else "best",
        "genome": genome,
        "episodes": episodes,
        "noop_max": tested.env.options.noop_max if has_noop_starts(cfg) else None,
        "max_episode_steps": max_episode_steps,
        "returns": returns.tolist(),
    }
    write_test_result(run, result)
    return result


def check_test_writable(run: RunDir) -> None:
    """Refuses, before any episode is played, a run whose ``test.json`` cannot be written (a
    directory of that name, a read-only or immutable run directory).

    Raises:
        ValueError: naming the path and the fix.
    """
    if run.test_path.is_dir():
        raise ValueError(
            f"{run.test_path} is a directory, so the test result cannot be written there; "
            "move it away"
        )
    check_writable(
        run.path, f"the test result {run.test_path}", "copy the run to a writable place first"
    )


def write_test_result(run: RunDir, result: dict[str, Any]) -> None:
    """Replaces ``test.json`` atomically; a failed write leaves no temp file behind.

    Raises:
        OSError: the file cannot be written (a full disk, say); the old one is kept.
    """
    with atomic_write(run.test_path) as file:
        file.write((json.dumps(result, indent=1) + "\n").encode("utf-8"))
