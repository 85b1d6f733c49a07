"""The random-policy yardstick of the Atari reproduction: uniform random actions under the
papers' test protocol, so a trained score reads against what no learning gets.

An episode plays actions drawn uniformly from the game's minimal action set, in the env of
the run's test (:func:`neuroevo.run.paper_evaluation.config_for_test`: the config's frame
skip, up to ``test.noop_max`` no-ops, the test's episode cap), from the same episode seeds as the
test of a run with that seed. Each episode's actions come from a generator seeded by its episode
seed alone, so the returns do not depend on how episodes share the env's slots.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from neuroevo.config.schema import Config, config_to_dict

if TYPE_CHECKING:
    from neuroevo.envs import BatchedEnv

ACTION_STREAM = 0x5A4D
"""Mixed with an episode's seed to seed its random actions (the episode seed itself draws the
no-ops inside the env)."""

MAX_SLOTS = 32
"""Most emulators stepped together; more episodes wait for a free one."""


def random_returns(cfg: Config, episodes: int) -> np.ndarray:
    """float64 ``[episodes]``: one random-policy episode per test seed of ``cfg.seed``.

    Args:
        cfg: a run's config (an Atari env); its ``test`` section sets the no-ops and the cap.
        episodes: how many episodes, >= 1.

    Raises:
        ValueError: ``episodes`` below 1, or a config whose env has no minimal action set to
            draw from (not discrete).
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    from neuroevo.run.build import build_env
    from neuroevo.run.paper_evaluation import config_for_test, episode_seeds_for_test

    tested = config_for_test(cfg, None, cfg.test.max_episode_steps)
    seeds = episode_seeds_for_test(cfg.seed, episodes)
    env = build_env(tested, num_slots=min(episodes, MAX_SLOTS))
    try:
        if not env.action_spec.discrete:
            raise ValueError(f"{cfg.env.kind} '{cfg.env.id}' has no discrete actions to draw")
        return _play(env, seeds, env.action_spec.num_actions)
    finally:
        env.close()


def _play(env: BatchedEnv, seeds: np.ndarray, num_actions: int) -> np.ndarray:
    """Plays one episode per seed, a free slot taking the next episode as one ends."""
    import tensorflow as tf

    returns = np.zeros(len(seeds))
    rngs = [np.random.default_rng([int(seed), ACTION_STREAM]) for seed in seeds]
    waiting = list(range(len(seeds)))[::-1]
    playing: dict[int, int] = {}  # slot -> episode
    free = list(range(env.num_slots))
    while waiting or playing:
        starting = {free.pop(): waiting.pop() for _ in range(min(len(free), len(waiting)))}
        if starting:
            slots = tf.constant(list(starting), tf.int32)
            env.reset(slots, tf.constant([seeds[e] for e in starting.values()], tf.int64))
            playing.update(starting)
        slots = list(playing)
        actions = [int(rngs[playing[s]].integers(num_actions)) for s in slots]
        reward, terminated, truncated = env.step(
            tf.constant(slots, tf.int32), tf.constant(actions, tf.int32)
        )
        done = terminated.numpy() | truncated.numpy()
        for slot, gained, ended in zip(slots, reward.numpy(), done, strict=True):
            returns[playing[slot]] += gained
            if ended:
                del playing[slot]
                free.append(slot)
    return returns


def cached_random_score(cfg: Config, episodes: int, cache_dir: Path) -> dict[str, Any]:
    """The random policy's score for ``cfg``'s game and test protocol: read from
    ``cache_dir`` when an earlier call measured the same settings, else measured and saved.

    Returns:
        ``mean``, ``median``, ``std``, ``min``, ``max``, ``episodes``, ``seed``, the tested
        ``env`` section and every return.
    """
    from neuroevo.run.paper_evaluation import config_for_test, score

    env = config_to_dict(config_for_test(cfg, None, cfg.test.max_episode_steps).env)
    key = {"env": env, "episodes": episodes, "seed": cfg.seed}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    path = cache_dir / f"random-{cfg.env.id}-{digest}.json"
    if path.is_file():
        return json.loads(path.read_text())
    returns = random_returns(cfg, episodes)
    result = {**score(returns), **key, "returns": returns.tolist()}
    cache_dir.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(result, indent=1) + "\n")
    temp.replace(path)
    return result
