"""Recurrent policies: per-slot state through the evaluator, and memory an MLP cannot have."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import numpy as np
import pytest
import tensorflow as tf

from neuroevo.algorithms import make_algorithm
from neuroevo.config.schema import load_config
from neuroevo.envs.gym import GymEnv
from neuroevo.evaluation import EvalRequest, Evaluator
from neuroevo.genomes.noise import NoiseTable
from neuroevo.models import make_model


def _rollout(model, env, weights: np.ndarray, seed: int, max_steps: int) -> tuple[float, int]:
    """One episode in slot 0, step by step: the reference for the evaluator."""
    slot = tf.constant([0], tf.int32)
    model.load(slot, weights[None])
    model.reset_state(slot)
    env.reset(slot, tf.constant([seed], tf.int64))
    total, length = 0.0, 0
    while length < max_steps:
        action = model.act(slot, env.observation(slot))
        reward, terminated, truncated = env.step(slot, action)
        total += float(reward[0])
        length += 1
        if terminated[0] or truncated[0]:
            break
    return total, length


def test_evaluator_resets_state_when_a_slot_starts_an_episode(monkeypatch) -> None:
    """Continuous actions, so any difference in a network's state shows in the returns."""
    seed = 3
    steps = 12
    rng = np.random.default_rng(seed)
    env = GymEnv("Pendulum-v1", 2, max_episode_steps=steps, threads=1)
    model = make_model("lstm", 2, env.observation_spec, env.action_spec, units=3)
    weights = rng.normal(0.0, 1.0, (4, model.num_params)).astype(np.float32)
    seeds = rng.integers(0, 2**31, (4, 2))

    def evaluate(model):
        with Evaluator(env, model, lambda genomes: weights[np.asarray(genomes)], workers=2) as ev:
            return ev.evaluate(EvalRequest(list(range(4)), seeds))

    results = evaluate(model)  # 8 episodes through 2 slots: every slot is refilled
    single_env = GymEnv("Pendulum-v1", 1, max_episode_steps=steps, threads=1)
    single = make_model("lstm", 1, env.observation_spec, env.action_spec, units=3)
    expected = np.array(
        [
            [_rollout(single, single_env, weights[g], int(s), steps) for s in seeds[g]]
            for g in range(4)
        ]
    )
    np.testing.assert_allclose(results.returns, expected[..., 0], rtol=1e-6, err_msg=f"seed {seed}")
    # Without the reset, slots carry memory from one episode into the next: other results. A
    # new model, since evaluators of one model share the rollout they traced with its reset.
    forgetful = make_model("lstm", 2, env.observation_spec, env.action_spec, units=3)
    monkeypatch.setattr(forgetful, "reset_state", lambda indices: tf.no_op())
    assert np.abs(evaluate(forgetful).returns - results.returns).max() > 1e-3


class CueRecall(gymnasium.Env):
    """Step 0 shows a cue (+1 on even seeds, -1 on odd); then ``delay`` blank steps; the last
    action is rewarded 1 if it names the cue (action 1 for +1). Memoryless policies see the
    same blank observation at the last step whatever the cue, so over balanced cues they
    score exactly 1/2."""

    def __init__(self, delay: int = 2):
        self.delay = delay
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cue = 1.0 if (seed or 0) % 2 == 0 else -1.0
        self._t = 0
        return np.array([self._cue], np.float32), {}

    def step(self, action):
        self._t += 1
        last = self._t > self.delay
        reward = float(last and int(action) == int(self._cue > 0))
        return np.zeros(1, np.float32), reward, last, False, {}


@pytest.mark.parametrize(
    ("name", "options"), [("lstm", {"units": 2}), ("mlp", {"hidden_sizes": [4]})]
)
def test_a_recurrent_policy_learns_what_an_mlp_cannot(name, options) -> None:
    env = GymEnv(CueRecall, 16, threads=1)
    model = make_model(name, 16, env.observation_spec, env.action_spec, **options)
    ga = make_algorithm(
        "ga",
        num_params=model.num_params,
        scales=model.init_scales(),
        noise=NoiseTable(0, size=100_000, cache_dir=False),
        seed=0,
        population_size=24,
        truncation=6,
        mutation_power=0.5,
        population_episodes=4,
        validation_candidates=3,
        validation_episodes=4,
    )
    test_seeds = np.arange(16).reshape(1, 16)  # 8 cues of each sign
    with Evaluator(env, model, ga.decoder.decode_batch, workers=1) as evaluator:
        for _ in range(12):
            request = ga.ask()
            ga.tell(request, evaluator.evaluate(request))
        score = evaluator.evaluate(EvalRequest([ga.elite], test_seeds)).returns.mean()
    if name == "mlp":
        assert score == 0.5
    else:
        assert score == 1.0, "seed 0"


def test_recurrent_models_come_from_the_config() -> None:
    budget = ["budget.generations=1"]
    cfg = load_config(None, [*budget, "model.name=gru", "model.gru.units=5", "env.kind=gym"])
    assert cfg.model.options["units"] == 5
    with pytest.raises(ValueError, match=r"model\.lstm\.units: 0 must be >= 1"):
        load_config(None, [*budget, "model.name=lstm", "model.lstm.units=0"])
    with pytest.raises(ValueError, match="virtual batch norm"):
        make_model(
            "lstm",
            2,
            GymEnv("CartPole-v1", 1).observation_spec,
            GymEnv("CartPole-v1", 1).action_spec,
            virtual_batch_norm=True,
        )


def test_the_in_graph_rollout_resets_state_like_the_per_step_path() -> None:
    """On an op env (the maze) the trainer's default is the in-graph rollout; with 4 slots for
    9 episodes a generation every slot is refilled, so a missed reset would change scores."""
    import neuroevo as ne

    config = Path(__file__).resolve().parents[2] / "configs" / "maze_ga.yaml"
    overrides = {
        "model.name": "lstm",
        "model.lstm.units": 4,
        "budget.frames": None,
        "budget.target_return": None,
        "budget.generations": 2,
        "algorithm.ga": {
            "population_size": 8,
            "truncation": 2,
            "validation_candidates": 2,
            "validation_episodes": 1,
        },
        "noise.size": 1_000_000,
        "evaluator.slots_per_worker": 4,
        "env.max_episode_steps": 50,
    }
    scores = {
        mode: [
            (s.best, s.mean, s.elite_score)
            for s in ne.train(config, {**overrides, "evaluator.rollout": mode}).summaries
        ]
        for mode in ("graph", "step")
    }
    assert scores["graph"] == scores["step"]
