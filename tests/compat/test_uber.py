"""Replaying Uber deep-neuroevolution genomes: noise table, seed lists, layout, observations.

References are written here from Uber's gpu_implementation files (github.com/uber-research/
deep-neuroevolution): ``helper.py`` (SharedNoiseTable), ``models/base.py`` + ``models/dqn.py``
(variables, scale_by, compute_weights_from_seeds, the network), ``gym_tensorflow/atari``
(tf_atari.cpp reset/step, tf_atari.py palette + max + resize_bilinear) and
``wrappers/stack_frames.py`` (zero-started stack). Noise tables are small prefixes.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from neuroevo.compat.uber import (
    FROSTBITE_ELITE,
    UberGenomeDecoder,
    genome_from_seeds,
    load_uber_genome,
    parse_seeds,
    seeds_from_genome,
    uber_noise_table,
    uber_permutation,
)
from neuroevo.envs.base import ActionSpec, ObservationSpec
from neuroevo.genomes.genome import GAGenome
from neuroevo.genomes.noise import NoiseTable
from neuroevo.models import make_model

TABLE_SIZE = 4_400_000  # > LargeModel's 4,052,658 parameters, and more than one chunk
UBER_ARCHITECTURES = {
    # Uber's _make_net: (name, kind, kernel, filters/units, stride, std)
    "nature_small": [
        ("conv1", "conv", 8, 16, 4, 1.0),
        ("conv2", "conv", 4, 32, 2, 1.0),
        ("fc", "dense", None, 256, None, 1.0),
        ("out", "dense", None, None, None, 0.1),
    ],
    "nature_large": [
        ("conv1", "conv", 8, 32, 4, 1.0),
        ("conv2", "conv", 4, 64, 2, 1.0),
        ("conv3", "conv", 3, 64, 1, 1.0),
        ("fc", "dense", None, 512, None, 1.0),
        ("out", "dense", None, None, None, 0.1),
    ],
}


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> NoiseTable:
    return uber_noise_table(TABLE_SIZE, cache_dir=tmp_path_factory.mktemp("noise"))


# ------------------------------------------------------------------------------ noise table


def test_noise_table_is_randomstate_123_randn(table: NoiseTable) -> None:
    expected = np.random.RandomState(123).randn(TABLE_SIZE).astype(np.float32)
    np.testing.assert_array_equal(table.get(0, 1000), expected[:1000])
    np.testing.assert_array_equal(table.get(TABLE_SIZE - 1000, 1000), expected[-1000:])
    np.testing.assert_array_equal(np.asarray(table.get(0, TABLE_SIZE)), expected)
    in_memory = uber_noise_table(5000, cache_dir=False)
    np.testing.assert_array_equal(in_memory.get(0, 5000), expected[:5000])  # a prefix
    again = uber_noise_table(TABLE_SIZE, cache_dir=table.path.parent)
    assert not again.generated  # the cached file is mapped, not regenerated


def test_noise_table_rejects_bad_generator_and_seed() -> None:
    with pytest.raises(ValueError, match="generator must be one of 'pcg64', 'uber'"):
        NoiseTable(0, 10, cache_dir=False, generator="numpy")
    with pytest.raises(ValueError, match=r"needs a seed < 2\*\*32"):
        NoiseTable(2**32, 10, cache_dir=False, generator="uber")


# ------------------------------------------------------------------------------- seed lists


def random_seed_list(rng: np.random.Generator, num_params: int, length: int) -> list:
    high = TABLE_SIZE - num_params + 1
    powers = rng.choice([0.002, 0.005, 0.01], size=length)
    return [int(rng.integers(high))] + [
        [int(i), float(p)] for i, p in zip(rng.integers(0, high, length), powers, strict=True)
    ]


def test_seed_lists_round_trip_through_every_format(tmp_path, rng) -> None:
    seeds = random_seed_list(rng, 1000, 7)
    genome = genome_from_seeds(seeds)
    assert genome.init_index == seeds[0]
    assert genome.mutations == tuple((i, p) for i, p in seeds[1:])
    assert seeds_from_genome(genome) == seeds
    as_tuples = "(" + ", ".join([str(seeds[0]), *(f"({i}, {p!r})" for i, p in seeds[1:])]) + ")"
    for text in (json.dumps(seeds), as_tuples, f"seeds = {seeds!r}"):
        assert parse_seeds(text).genome == genome
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"game": "pong", "model": "Model", "seeds": seeds}))
    loaded = load_uber_genome(path)
    assert (loaded.genome, loaded.game, loaded.model) == (genome, "pong", "nature_small")
    # A bare mutation index is Uber's legacy power 0.005.
    assert genome_from_seeds([5, 9]).mutations == ((9, 0.005),)


def test_published_frostbite_elite_ships_with_attribution() -> None:
    elite = load_uber_genome(FROSTBITE_ELITE)
    data = json.loads(FROSTBITE_ELITE.read_text())
    assert "Copyright (c) 2018 Uber Technologies" in data["license"]
    assert (elite.game, elite.model) == ("frostbite", "nature_large")
    assert elite.genome.init_index == 157822315
    assert elite.genome.mutations[0] == (94987453, 0.002)
    assert len(elite.genome.mutations) == 265


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "non-empty list"),
        ("[-1]", r"seeds\[0\] must be a non-negative integer"),
        ("[3, [4]]", r"seeds\[1\] must be \[noise_index, power\]"),
        ("[3, [4, 'x']]", r"seeds\[1\]: the mutation power must be a finite number"),
        ("[3, [1.5, 0.1]]", r"seeds\[1\]\[0\] must be a non-negative integer"),
        ("{'seed': [1]}", "needs a 'seeds' key"),
        ('{"seeds": [1], "model": "Huge"}', "model 'Huge' is not one of Uber's"),
        ("import os", "neither JSON nor a Python literal"),
    ],
)
def test_bad_seed_lists_are_clear_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_seeds(text, "genome.txt")


def test_missing_and_binary_files(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        load_uber_genome(tmp_path / "nope.json")
    (tmp_path / "b").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match="not a text file"):
        load_uber_genome(tmp_path / "b")


# ------------------------------------------------------------------------- weights, network


def uber_variables(name: str, num_actions: int) -> list[tuple[str, tuple[int, ...], float]]:
    """Uber's make_weights order: (name, shape, scale_by) of every variable, from _make_net."""
    variables, h, w, c = [], 84, 84, 4
    for layer, kind, kernel, width, stride, std in UBER_ARCHITECTURES[name]:
        if kind == "conv":
            shape = (kernel, kernel, c, width)
            variables.append((f"{layer}/w", shape, std / np.sqrt(np.prod(shape[:-1]))))
            variables.append((f"{layer}/b", (1, 1, 1, width), 0.0))
            h, w, c = -(-h // stride), -(-w // stride), width
        else:
            units = num_actions if width is None else width
            shape = (h * w * c, units)
            variables.append((f"{layer}/w", shape, std / np.sqrt(np.prod(shape[:-1]))))
            variables.append((f"{layer}/b", (1, units), 0.0))
            h, w, c = 1, 1, units
    return variables


def uber_compute_weights_from_seeds(noise: np.ndarray, seeds: list, scale_by: np.ndarray):
    """models/base.py, verbatim arithmetic (float32 throughout, as under numpy 1.x)."""
    theta = noise[seeds[0] : seeds[0] + scale_by.size].copy() * scale_by
    for idx, power in seeds[1:]:
        theta = theta + np.float32(power) * noise[idx : idx + scale_by.size]
    return theta


def uber_forward(weights: dict[str, np.ndarray], name: str, obs: np.ndarray) -> np.ndarray:
    """Uber's _make_net on one batch: extract_image_patches + matmul convolutions (= SAME
    conv2d), HWC flatten, x @ w[in, out] + b, relu everywhere but the output."""
    x = tf.constant(obs)
    for layer, kind, _, _, stride, _ in UBER_ARCHITECTURES[name]:
        w, b = weights[f"{layer}/w"], weights[f"{layer}/b"]
        if kind == "conv":
            x = tf.nn.conv2d(x, w, strides=stride, padding="SAME") + b
        else:
            x = tf.reshape(x, [x.shape[0], -1]) @ w + b
        if layer != "out":
            x = tf.nn.relu(x)
    return x.numpy()


@pytest.mark.parametrize("name", ["nature_small", "nature_large"])
def test_decoded_weights_and_forward_equal_uber(table: NoiseTable, name: str, rng) -> None:
    num_actions = int(rng.integers(3, 19))
    model = make_model(
        name, 2, ObservationSpec((84, 84, 4), tf.float32), ActionSpec(True, num_actions)
    )
    variables = uber_variables(name, num_actions)
    sizes = [int(np.prod(shape)) for _, shape, _ in variables]
    assert sum(sizes) == model.num_params
    scale_by = np.concatenate(
        [
            np.float64(s) * np.ones(n, np.float32)
            for (_, _, s), n in zip(variables, sizes, strict=True)
        ]
    ).astype(np.float32)
    seeds = random_seed_list(rng, model.num_params, 5)
    noise = np.asarray(table.get(0, TABLE_SIZE))
    expected = uber_compute_weights_from_seeds(noise, seeds, scale_by)

    decoder = UberGenomeDecoder(model, table)
    genome = genome_from_seeds(seeds)
    np.testing.assert_array_equal(decoder.decode_uber_layout(genome), expected)

    offsets = np.cumsum([0, *sizes])
    uber_weights = {
        var: expected[offsets[i] : offsets[i + 1]].reshape(shape)
        for i, (var, shape, _) in enumerate(variables)
    }
    obs = rng.random((2, 84, 84, 4), dtype=np.float32)
    model.load([1, 0], np.stack([decoder.decode(genome), np.zeros(model.num_params, np.float32)]))
    ours = model.forward([1], obs[:1]).numpy()
    reference = uber_forward(uber_weights, name, obs[:1])
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())
    assert model.act([1], obs[:1]).numpy()[0] == np.argmax(reference[0])


def test_permutation_transposes_only_dense_kernels() -> None:
    model = make_model("mlp", 1, ObservationSpec((3,), tf.float32), ActionSpec(True, 2))
    perm = uber_permutation(model)
    assert sorted(perm.tolist()) == list(range(model.num_params))
    kernel = model.layout[0]
    units, fan_in = kernel.shape
    uber_kernel = np.arange(fan_in * units).reshape(fan_in, units)  # Uber's [in, out]
    np.testing.assert_array_equal(perm[: kernel.size].reshape(units, fan_in), uber_kernel.T)


def test_decoder_needs_ubers_table() -> None:
    model = make_model(
        "mlp", 1, ObservationSpec((3,), tf.float32), ActionSpec(True, 2), hidden_sizes=[]
    )
    with pytest.raises(ValueError, match="index Uber's table"):
        UberGenomeDecoder(model, NoiseTable(0, 1000, cache_dir=False))
    decoder = UberGenomeDecoder(model, uber_noise_table(1000, cache_dir=False))
    with pytest.raises(ValueError, match="outside the table"):
        decoder.decode(GAGenome(999))


# ----------------------------------------------------------------------------- observations

GRAY_WEIGHTS = np.array([0.299, 0.587, 0.114], np.float32)


def uber_gray(rgb: np.ndarray) -> np.ndarray:
    """tf_atari.py: rgb_palette (uint8 * (1/255) in float32) dotted with the luma weights."""
    return np.dot(rgb.astype(np.float32) * (1.0 / 255.0), GRAY_WEIGHTS)


def uber_episode(game: str, seed: int, actions: np.ndarray, noop_max: int = 30) -> dict:
    """Uber's AtariEnvironment + AtariEnv.observation + StackFramesWrapper on ale-py, frame by
    frame: [previous, current] frame in float gray, max, resize_bilinear(align_corners=True)."""
    import ale_py

    from neuroevo.envs.atari import episode_draws, rom_path

    ale_seed, noops = episode_draws(seed, noop_max)
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setInt("random_seed", ale_seed)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(rom_path(game))
    ale.reset_game()
    action_set = ale.getMinimalActionSet()
    frames = [ale.getScreenRGB()] * 2

    def act(action) -> int:
        reward = ale.act(action)
        frames[:] = [frames[1], ale.getScreenRGB()]
        return reward

    def observe() -> np.ndarray:
        pooled = np.max([uber_gray(f) for f in frames], axis=0)[None, :, :, None]
        resized = tf.compat.v1.image.resize_bilinear(pooled, (84, 84), align_corners=True)
        return resized.numpy()[0, :, :, 0]

    def step(index: int) -> tuple[int, bool]:
        reward = 0
        for _ in range(4):
            reward += act(action_set[index])
            if ale.game_over():
                return reward, True
        return reward, False

    for _ in range(noops):
        act(ale_py.Action.NOOP)
        if ale.game_over():
            ale.reset_game()
    if action_set[1] == ale_py.Action.FIRE:
        for index in (1, 2):
            step(index)
            if ale.game_over():
                ale.reset_game()
    stack = np.zeros((84, 84, 4), np.float32)
    stack[..., -1] = observe()
    observations, rewards, dones = [stack.copy()], [], []
    for a in actions:
        reward, done = step(a)
        stack = np.concatenate([stack[..., 1:], observe()[..., None]], axis=-1)
        observations.append(stack.copy())
        rewards.append(reward)
        dones.append(done)
        if done:
            break
    return {"obs": np.array(observations), "reward": np.array(rewards), "done": np.array(dones)}


@pytest.mark.parametrize(("game", "steps"), [("frostbite", 300), ("ms_pacman", 60)])
def test_uber_observations_equal_reference_frame_by_frame(game: str, steps: int, rng) -> None:
    """Frostbite presses FIRE then UP after the no-ops; Ms. Pac-Man (action 1 is UP) does not."""
    from neuroevo.envs.atari import AtariEnv

    seed = int(rng.integers(2**31))
    env = AtariEnv(game, 1, preprocessing="uber")
    actions = rng.integers(0, env.action_spec.num_actions, steps)
    expected = uber_episode(game, seed, actions)
    env.reset([0], [seed])
    observations, rewards, dones = [env.observation([0]).numpy()[0]], [], []
    for a in actions[: len(expected["reward"])]:
        result = env.step([0], [a])
        observations.append(env.observation([0]).numpy()[0])
        rewards.append(float(result.reward[0]))
        dones.append(bool(result.terminated[0]))
    assert env.observation_spec.dtype == tf.float32
    np.testing.assert_array_equal(rewards, expected["reward"])
    np.testing.assert_array_equal(dones, expected["done"])
    for t, (ours, theirs) in enumerate(zip(observations, expected["obs"], strict=True)):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-6, err_msg=f"step {t}")
    assert np.all(observations[0][..., :3] == 0)  # the stack starts from zeros


def test_uber_options_are_validated() -> None:
    from neuroevo.envs.atari import AtariEnv

    with pytest.raises(ValueError, match=r"fire_reset: .*false with preprocessing: uber"):
        AtariEnv("pong", 1, preprocessing="uber", fire_reset=True)
    with pytest.raises(ValueError, match="preprocessing: 'ubr' is not one of"):
        AtariEnv("pong", 1, preprocessing="ubr")
    env = AtariEnv("pong", 1, preprocessing="uber")
    assert env.max_episode_steps == 100_000
    with pytest.raises(tf.errors.InvalidArgumentError, match="does not match the env's"):
        env._ops.neuroevo_atari_observation(env.handle, [0], dtype=tf.uint8)


def test_evaluate_cli_replays_a_seed_list(tmp_path, monkeypatch, capsys) -> None:
    """The command end to end on a small table prefix (the real one is 1 GB)."""
    from neuroevo.cli import evaluate
    from neuroevo.compat import uber
    from neuroevo.genomes import noise

    monkeypatch.setattr(uber, "UBER_NOISE_SIZE", 1_100_000)
    # The table only: NEUROEVO_CACHE also holds the built op libraries.
    monkeypatch.setattr(noise, "default_cache_dir", lambda: tmp_path)
    path = tmp_path / "seeds.json"
    path.write_text("seeds = [12345, [678, 0.002]]")
    argv = ["--uber-genome", str(path), "--game", "pong", "--uber-model", "Model"]
    argv += ["--episodes", "2", "--max-steps", "40"]
    assert evaluate.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("returns: ") and len(out[0].split()) == 3
    assert "on pong over 2 episodes: mean" in out[1]
    assert evaluate.main(argv) == 0  # same seeds, same episodes
    assert capsys.readouterr().out.splitlines() == out
