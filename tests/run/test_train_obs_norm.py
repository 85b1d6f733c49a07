"""Observation normalisation through a whole training run (tiny ES on MuJoCo Hopper): the
statistics come from the sampled episodes, reach the model between generations, survive a
resume, and travel with the elite so that a replay reproduces the score training saw."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from neuroevo.config.schema import load_config
from neuroevo.evaluation.obs_norm import RunningObsStats
from neuroevo.run import checkpoints as checkpoint
from neuroevo.run.plan import plan
from neuroevo.run.policy import Policy, evaluate_elite
from neuroevo.run.run_dir import RunDir
from neuroevo.run.trainer import Trainer, open_run

ROOT = Path(__file__).resolve().parents[2]
TINY_HOPPER = ROOT / "configs" / "tiny_hopper.yaml"


class Recorder:
    """Wraps a trainer's ``evaluator.evaluate`` to keep every request's results, and the
    statistics the model held while they ran."""

    def __init__(self, trainer: Trainer):
        self.calls: list[dict] = []
        self._trainer = trainer
        self._evaluate = trainer.evaluator.evaluate
        trainer.evaluator.evaluate = self

    def __call__(self, request, **kwargs):
        model = self._trainer.model
        held = (model.obs_mean.numpy().copy(), model.obs_std.numpy().copy())
        results = self._evaluate(request, **kwargs)
        self.calls.append(
            {
                "seeds": request.episode_seeds,
                "results": results,
                "held": held,
                "sample": request.sample_obs,
            }
        )
        return results


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    cfg = load_config(TINY_HOPPER)
    run_dir = tmp_path_factory.mktemp("hopper") / "run"
    trainer = open_run(plan(cfg, run_dir), quiet=True)
    recorder = Recorder(trainer)
    generations = []
    trainer.train(on_generation=lambda summary: generations.append(len(recorder.calls)))
    return cfg, run_dir, recorder.calls, generations


def test_statistics_are_the_sampled_observations_merged_between_generations(trained):
    _, run_dir, calls, generations = trained
    assert generations == [2, 4, 6]  # population + centre phase per generation
    expected = RunningObsStats((11,))
    for generation, end in enumerate(generations):
        phases = calls[end - 2 : end]
        for call in phases:  # one generation's networks all see the same statistics
            np.testing.assert_array_equal(call["held"][0], expected.mean)
            np.testing.assert_array_equal(call["held"][1], expected.std)
            sample = call["sample"]
            assert sample is None or sample.dtype == bool
            if call["results"].obs_stats is not None:
                sampled_steps = call["results"].lengths[sample].sum()
                assert call["results"].obs_stats.count == sampled_steps
        for call in phases:
            if call["results"].obs_stats is not None:
                expected.merge(call["results"].obs_stats)
        assert expected.count > 0, f"nothing sampled by generation {generation}"
    _, state = checkpoint.latest_checkpoint(RunDir(run_dir).checkpoint_dir)
    for key, value in expected.state_dict().items():
        np.testing.assert_array_equal(state["obs_stats"][key], value, err_msg=key)
    assert not np.allclose(expected.mean, 0.0) and not np.allclose(expected.std, 1.0)


def test_elite_replays_its_score_with_its_statistics(trained):
    cfg, run_dir, calls, _ = trained
    center = calls[-1]
    assert center["results"].returns.shape == (1, 1)
    run = RunDir(run_dir)
    genome, weights = run.load_elite()
    obs_stats = run.load_elite_obs_stats()
    np.testing.assert_array_equal(obs_stats[0], center["held"][0])
    np.testing.assert_array_equal(obs_stats[1], center["held"][1])
    seeds = center["seeds"].reshape(-1)
    replayed = evaluate_elite(cfg, Policy(weights, obs_stats), seeds)
    np.testing.assert_array_equal(replayed, center["results"].returns[:, 0])
    identity = (np.zeros_like(obs_stats[0]), np.ones_like(obs_stats[1]))
    unnormalised = evaluate_elite(cfg, Policy(weights, identity), seeds)
    assert not np.array_equal(unnormalised, replayed)
    assert genome["kind"] == "es"


def test_resumed_run_has_the_same_statistics_and_elite(trained, tmp_path):
    _, run_dir, _, _ = trained
    resumed_dir = tmp_path / "resumed"
    open_run(
        plan(load_config(TINY_HOPPER, ["budget.generations=1"]), resumed_dir), quiet=True
    ).train()
    open_run(plan(load_config(TINY_HOPPER), resumed_dir, resume=True), quiet=True).train()
    reference, resumed = RunDir(run_dir), RunDir(resumed_dir)
    np.testing.assert_array_equal(resumed.load_elite()[1], reference.load_elite()[1])
    for a, b in zip(resumed.load_elite_obs_stats(), reference.load_elite_obs_stats(), strict=True):
        np.testing.assert_array_equal(a, b)
    _, expected = checkpoint.latest_checkpoint(reference.checkpoint_dir)
    _, state = checkpoint.latest_checkpoint(resumed.checkpoint_dir)
    for key in ("count", "mean", "m2"):
        np.testing.assert_array_equal(state["obs_stats"][key], expected["obs_stats"][key])


def test_observation_normalization_is_an_mlp_option():
    from neuroevo.config.schema import ConfigError

    with pytest.raises(ConfigError, match=r"renamed to 'model\.mlp\.observation_normalization'"):
        load_config(ROOT / "configs" / "tiny_atari.yaml", ["model.observation_normalization=true"])
    with pytest.raises(ConfigError, match="obs_stats_fraction"):
        load_config(TINY_HOPPER, ["model.obs_stats_fraction=0"])


def test_play_refuses_an_elite_without_statistics(trained, tmp_path):
    from neuroevo.cli import play

    _, run_dir, _, _ = trained
    copy = RunDir(tmp_path / "copy")
    copy.path.mkdir()
    (copy.path / "config.yaml").write_bytes((run_dir / "config.yaml").read_bytes())
    genome, weights = RunDir(run_dir).load_elite()
    copy.save_elite(genome, weights)
    assert play.main([str(copy.path), "--episodes", "1"]) == 2
