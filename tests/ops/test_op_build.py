"""The op build system: cache keys follow sources, TensorFlow and the target CPU; missing tools
give install hints; the lock serialises builds; old builds are pruned; and the portable
(non-AVX-512) kernels compute what the native ones do."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from neuroevo.ops import build


@pytest.fixture
def sources(tmp_path, monkeypatch) -> Path:
    """A private copy of the C++ sources that the key is computed from."""
    copy = tmp_path / "custom_ops"
    shutil.copytree(build.source_dir(), copy)
    monkeypatch.setattr(build, "source_dir", lambda: copy)
    return copy


def test_key_follows_sources_tensorflow_and_target(sources, monkeypatch):
    monkeypatch.delenv("NEUROEVO_MARCH", raising=False)
    monkeypatch.delenv("NEUROEVO_PORTABLE_BUILD", raising=False)
    key, path = build.library_key("core")
    assert build.library_key("core") == (key, path)  # deterministic
    assert path.name == f"libneuroevo_core-{key}.so"

    source = sources / "core" / "indexed_matmul.cc"
    original = source.read_text()
    source.write_text(original + "\n// edited\n")
    assert build.library_key("core")[0] != key
    source.write_text(original)
    assert build.library_key("core")[0] == key

    shared_header = next((sources / "common").glob("*.h"))
    shared_header.write_text(shared_header.read_text() + "\n// edited\n")
    assert build.library_key("core")[0] != key, "a header under common/ is a source too"
    shared_header.write_text(shared_header.read_text().removesuffix("\n// edited\n"))

    testing = sources / "core" / "indexed_matmul_testing.cc"
    testing.write_text(testing.read_text() + "\n// edited\n")
    assert build.library_key("core")[0] == key, "another library's source beside it is not"
    atari_key = build.library_key("atari")[0]
    bench = sources / "atari" / "atari_bench_ops.cc"
    bench.write_text(bench.read_text() + "\n// edited\n")
    assert build.library_key("atari")[0] == atari_key
    assert build.library_key("atari_bench")[0] != atari_key

    real_flags = build._tf_flags
    monkeypatch.setattr(build, "_tf_flags", lambda: ("9.99.0", *real_flags()[1:]))
    assert build.library_key("core")[0] != key
    monkeypatch.setattr(build, "_tf_flags", real_flags)

    monkeypatch.setenv("NEUROEVO_MARCH", "x86-64-v3")
    avx2 = build.library_key("core")[0]
    assert avx2 != key
    monkeypatch.setenv("NEUROEVO_MARCH", "x86-64")
    baseline = build.library_key("core")[0]
    assert baseline not in (key, avx2)
    monkeypatch.delenv("NEUROEVO_MARCH")
    monkeypatch.setenv("NEUROEVO_PORTABLE_BUILD", "1")
    assert build.library_key("core")[0] == baseline, "the older spelling of the baseline"


def test_march_knob_validates_and_names_the_accepted_forms(monkeypatch):
    monkeypatch.delenv("NEUROEVO_PORTABLE_BUILD", raising=False)
    monkeypatch.delenv("NEUROEVO_MARCH", raising=False)
    assert build.target_march() == "native"
    monkeypatch.setenv("NEUROEVO_MARCH", "x86-64-v3")
    assert build.target_march() == "x86-64-v3"
    for bad in ("-O3", "native -fno-tree-vectorize", "x86-64;rm"):
        monkeypatch.setenv("NEUROEVO_MARCH", bad)
        with pytest.raises(ValueError, match="x86-64-v3 \\(AVX2 \\+ FMA\\)"):
            build.target_march()
    monkeypatch.setenv("NEUROEVO_MARCH", "no-such-cpu")
    with pytest.raises(ValueError, match=r"rejects -march=no-such-cpu(.|\n)*x86-64 \(the baseline"):
        build.target_isa()
    monkeypatch.setenv("NEUROEVO_MARCH", "x86-64-v3")
    monkeypatch.setenv("NEUROEVO_PORTABLE_BUILD", "1")
    with pytest.raises(ValueError, match="contradicts NEUROEVO_MARCH=x86-64-v3"):
        build.target_march()


@pytest.mark.parametrize(
    ("march", "isa", "has", "lacks"),
    [
        ("x86-64", "baseline", [], ["AVX2", "FMA", "AVX-512"]),
        ("x86-64-v3", "AVX2", ["AVX2", "FMA"], ["AVX-512"]),
        ("icelake-server", "AVX-512", ["AVX-512", "AVX512VBMI", "AVX2"], ["AVX512BF16"]),
        ("cooperlake", "AVX-512", ["AVX-512", "AVX512BF16"], ["AVX512VBMI"]),
    ],
)
def test_target_isa_comes_from_the_compiler(monkeypatch, march, isa, has, lacks):
    if os.uname().machine != "x86_64":
        pytest.skip("x86-64 -march values")
    monkeypatch.delenv("NEUROEVO_PORTABLE_BUILD", raising=False)
    monkeypatch.setenv("NEUROEVO_MARCH", march)
    target = build.target_isa()
    assert (target["march"], target["isa"]) == (march, isa)
    assert set(has) <= set(target["features"])
    assert not set(lacks) & set(target["features"])


def test_missing_compiler_says_what_to_install(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-g++")
    with pytest.raises(build.OpBuildError, match="apt-get install g\\+\\+"):
        build._compiler()
    with pytest.raises(build.OpBuildError, match="is not installed"):
        build._run(["no-such-tool-at-all"], "configuring ALE")


def test_avx512_fp16_targets_compile_eigen(monkeypatch, tmp_path):
    """TF's Eigen AVX512-FP16 header does not compile with GCC 12: builds for a target that has
    the extension (Sapphire Rapids, or ``native`` on one) turn it off; others leave it alone."""
    if shutil.which(build._compiler()) is None or os.uname().machine != "x86_64":
        pytest.skip("needs an x86-64 C++ compiler")
    monkeypatch.delenv("NEUROEVO_PORTABLE_BUILD", raising=False)
    monkeypatch.setenv("NEUROEVO_MARCH", "sapphirerapids")
    flags = build.arch_flags()
    assert flags == ["-march=sapphirerapids", "-mno-avx512fp16"]
    source = tmp_path / "eigen.cc"
    source.write_text("#include <Eigen/Core>\nint main() { return 0; }\n")
    _, cflags, _ = build._tf_flags()
    result = subprocess.run(
        [build._compiler(), *cflags, *flags, "-fsyntax-only", str(source)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]

    monkeypatch.setenv("NEUROEVO_MARCH", "x86-64-v3")
    assert build.arch_flags() == ["-march=x86-64-v3"]
    assert not build._accepts("-mno-such-option-anywhere")
    monkeypatch.setenv("NEUROEVO_MARCH", "sapphirerapids")
    # a compiler before GCC 12
    monkeypatch.setattr(build, "_accepts", lambda flag, compiler=None: False)
    assert build.arch_flags() == ["-march=sapphirerapids"]


def test_library_state_checks_size_and_checksum(tmp_path):
    library = tmp_path / "libneuroevo_core-0123456789abcdef.so"
    assert build.library_state(library) == "missing"
    library.write_bytes(b"\x7fELF" + bytes(1000))
    assert build.library_state(library) == "corrupt", "no manifest: cannot be trusted"
    manifest = {"size": 1004, "sha256": hashlib.sha256(library.read_bytes()).hexdigest()}
    build.manifest_path(library).write_text(json.dumps(manifest))
    assert build.library_state(library) == "current"
    library.write_bytes(b"\x7fELF" + bytes(999) + b"\x01")  # same size, other bytes
    assert build.library_state(library) == "corrupt"
    library.write_bytes(b"\x7fELF" + bytes(500))  # truncated
    assert build.library_state(library) == "corrupt"
    build.manifest_path(library).write_text("{not json")
    assert build.library_state(library) == "corrupt"


LOAD_CORE = "from neuroevo import ops; ops.load('core'); print('loaded')"


def test_truncated_library_is_rebuilt_not_loaded(tmp_path):
    """A truncated .so would kill the loading process with a bus error: it is rebuilt."""
    _, built = build.library_key("core")
    build.build_library("core")
    cached = tmp_path / "ops" / built.name
    cached.parent.mkdir()
    shutil.copy(built, cached)
    shutil.copy(build.manifest_path(built), build.manifest_path(cached))
    with open(cached, "r+b") as handle:
        handle.truncate(cached.stat().st_size // 2)
    env = dict(os.environ, NEUROEVO_CACHE=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="2")

    doctor = subprocess.run(
        [sys.executable, "-m", "neuroevo.doctor"], env=env, capture_output=True, text=True
    )
    assert re.search(r"op library +core +corrupt: size or sha256 differ", doctor.stdout), (
        doctor.stdout
    )
    assert re.search(r"op library +core_testing +\(test only\)", doctor.stdout), doctor.stdout

    done = subprocess.run(
        [sys.executable, "-c", LOAD_CORE], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loaded" in done.stdout
    assert "does not match its recorded size and checksum" in done.stderr
    assert build.manifest_path(cached).exists()
    assert cached.stat().st_size == build.read_manifest(cached)["size"]


def test_each_op_is_registered_by_one_library():
    """Two libraries registering one op name cannot both load in a process; bench and test
    ops stay out of the production libraries."""
    src = build.source_dir()
    owner: dict[str, str] = {}
    for name, spec in build.LIBRARIES.items():
        for source in spec.sources:
            for op in re.findall(
                r'REGISTER(?:_OP|_SLOT_OP)\("(\w+)"\)', (src / source).read_text()
            ):
                assert op not in owner, f"{op} is registered by {owner[op]} and {name}"
                owner[op] = name
    assert owner["NeuroevoAtariRawLoop"] == "atari_bench"
    assert owner["NeuroevoMujocoRawLoop"] == "mujoco_bench"
    assert owner["NeuroevoIndexedMatmul"] == "core_testing"
    assert owner["NeuroevoResourceIndexedMatmul"] == "core"
    purposes = {name: spec.purpose for name, spec in build.LIBRARIES.items()}
    assert purposes == {
        "core": "production",
        "atari": "production",
        "mujoco": "production",
        "maze": "production",
        "rollout": "production",
        "atari_bench": "bench",
        "mujoco_bench": "bench",
        "core_testing": "test",
    }


def test_libraries_are_declared_by_their_folders(tmp_path):
    """The table is the folders' declarations: the ops of a new C++ env kind are its folder."""
    expected = {
        "atari": ("production", ("atari/atari_ops.cc",), "ale"),
        "core": ("production", ("core/indexed_matmul.cc",), None),
        "maze": ("production", ("maze/maze_ops.cc",), None),
        "mujoco": ("production", ("mujoco/mujoco_ops.cc",), "mujoco"),
        "atari_bench": ("bench", ("atari/atari_bench_ops.cc",), "ale"),
        "mujoco_bench": ("bench", ("mujoco/mujoco_bench_ops.cc",), "mujoco"),
        "core_testing": ("test", ("core/indexed_matmul_testing.cc",), None),
    }
    got = {n: (s.purpose, s.sources, s.engine) for n, s in build.LIBRARIES.items()}
    assert got.pop("rollout") == (
        "production",
        ("rollout/rollout_ops.cc", "rollout/episode_ops.cc"),
        None,
    )
    assert build.LIBRARIES["rollout"].cflags == ("-ffp-contract=off",)
    assert got == expected
    folders = {path.parent.name for path in build.source_dir().glob("*/*.cc")}
    assert folders == {path.parent.name for path in build.source_dir().glob("*/libraries.yaml")}

    src = tmp_path / "custom_ops"
    (src / "grid").mkdir(parents=True)
    (src / "grid" / "libraries.yaml").write_text("grid:\n  sources: [grid_ops.cc]\n")
    (grid,) = build.discover_libraries(src).values()
    assert grid == build.LibrarySpec("grid", ("grid/grid_ops.cc",))
    for bad, message in [
        ("grid: {sources: [a.cc], link: ale}", "takes only sources, links, purpose and cflags"),
        ("grid: {sources: [a.cc], cflags: O3}", "cflags must list compiler flags"),
        ("grid: {sources: [../core/a.cc]}", "sources must list file names of grid/"),
        ("grid: {sources: [a.cc], links: bullet}", "links must be one of"),
        ("grid: {sources: [a.cc], purpose: demo}", "purpose must be one of"),
        ("[grid]", "must map library names"),
        ("core: {sources: [a.cc]}", "'core' is declared twice"),
    ]:
        (src / "grid" / "libraries.yaml").write_text(bad)
        (src / "core").mkdir(exist_ok=True)
        (src / "core" / "libraries.yaml").write_text("core: {sources: [c.cc]}")
        with pytest.raises(build.OpBuildError, match=re.escape(message)):
            build.discover_libraries(src)


def test_unknown_library_is_named():
    with pytest.raises(ValueError, match="unknown op library 'atri'"):
        build.library_key("atri")


def test_file_lock_serialises_holders(tmp_path):
    """Each holder opens the lock file itself, as separate processes do."""
    lock = tmp_path / ".core.lock"
    inside, overlaps = [], []

    def hold():
        with build.file_lock(lock):
            if inside:
                overlaps.append(1)
            inside.append(1)
            time.sleep(0.05)
            inside.pop()

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not overlaps


def test_old_builds_are_pruned_newest_kept(tmp_path):
    now = time.time()
    builds = []
    for age in range(7):
        path = tmp_path / f"libneuroevo_core-{age:016x}.so"
        path.write_bytes(b"")
        os.utime(path, (now - age * 60, now - age * 60))
        builds.append(path)
    other = tmp_path / "libneuroevo_atari-0000000000000000.so"
    other.write_bytes(b"")
    oldest = builds[-1]  # a rebuild of an old key becomes the newest file
    os.utime(oldest, (now + 60, now + 60))
    build._drop_old_builds(oldest, "core")
    left = sorted(p.name for p in tmp_path.glob("libneuroevo_core-*.so"))
    assert left == sorted(p.name for p in [oldest, *builds[: build.KEEP_BUILDS - 1]])
    assert other.exists()


PORTABLE_FORWARD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorflow as tf
    from neuroevo.envs.base import ActionSpec, ObservationSpec
    from neuroevo.models import make_model

    spec = json.loads(sys.argv[1])
    obs_spec = ObservationSpec((84, 84, 4), tf.uint8)
    model = make_model(
        spec["model"], 5, obs_spec, ActionSpec(discrete=True, num_actions=6), dtype=spec["dtype"]
    )
    rng = np.random.default_rng(spec["seed"])
    params = rng.standard_normal((5, model.num_params)).astype(np.float32) * model.init_scales()
    model.load(tf.range(5), params)
    obs = rng.integers(0, 256, (3, 84, 84, 4), dtype=np.uint8)
    out = model.forward(tf.constant([4, 0, 2]), obs).numpy()
    np.save(spec["out"], out)
    """
)


@pytest.fixture(scope="module")
def portable_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("portable-cache")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_portable_kernels_match_native(tmp_path, portable_cache, dtype):
    """Builds the core library for the generic x86-64 baseline (4-float SSE vectors) in a
    private cache and compares a forward pass with this machine's native build on the same
    inputs. nature_large runs every kernel path: a direct convolution (conv1), packed patches
    (conv2, conv3), the dense dot products and the small inline output layer."""
    outputs = {}
    for mode in ("native", "portable"):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        if mode == "portable":
            env |= {"NEUROEVO_PORTABLE_BUILD": "1", "NEUROEVO_CACHE": str(portable_cache)}
        spec = {"model": "nature_large", "dtype": dtype, "seed": 11, "out": str(tmp_path / mode)}
        done = subprocess.run(
            [sys.executable, "-c", PORTABLE_FORWARD, json.dumps(spec)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outputs[mode] = np.load(tmp_path / f"{mode}.npy")
    error = np.abs(outputs["portable"] - outputs["native"]).max() / np.abs(outputs["native"]).max()
    print(f"{dtype}: portable vs native relative error {error:.2e}")
    assert error <= (1e-5 if dtype == "float32" else 1e-3)
    assert list((portable_cache / "ops").glob("libneuroevo_core-*.so"))


ATARI_EPISODE = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf
    from neuroevo.envs.atari import AtariEnv
    from neuroevo.ops import build

    env = AtariEnv("frostbite", num_slots=2)
    slots = tf.constant([0, 1])
    env.reset(slots, tf.constant([5, 6], tf.int64))
    rng = np.random.default_rng(0)
    observations = [env.observation(slots).numpy()]
    for _ in range(150):
        actions = rng.integers(0, env.action_spec.num_actions, 2, dtype=np.int32)
        result = env.step(slots, actions)
        observations.append(env.observation(slots).numpy())
        done = np.flatnonzero(result.terminated.numpy() | result.truncated.numpy())
        if done.size:
            env.reset(done.astype(np.int32), done.astype(np.int64) + 100)
    np.save(sys.argv[1], np.stack(observations))
    print(build.read_manifest(build.library_key("atari")[1])["isa"])
    """
)


@pytest.mark.slow
def test_atari_observations_are_the_same_for_every_target(tmp_path):
    """Builds the Atari op for the x86-64 baseline and x86-64-v3 (AVX2) in a private cache that
    reuses the ALE static library, and checks a fixed-seed episode's observations are those of
    the native build, byte for byte."""
    if os.uname().machine != "x86_64":
        pytest.skip("x86-64 targets")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "ale").symlink_to(build.ensure_ale().parents[1])
    observations, isas = {}, {}
    for march in ("native", "x86-64-v3", "x86-64"):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", NEUROEVO_MARCH=march)
        env.pop("NEUROEVO_PORTABLE_BUILD", None)
        if march != "native":
            env["NEUROEVO_CACHE"] = str(cache)
        out = tmp_path / f"{march}.npy"
        done = subprocess.run(
            [sys.executable, "-c", ATARI_EPISODE, str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        observations[march] = np.load(out)
        isas[march] = done.stdout.split()[-1]
    assert isas["x86-64"] == "baseline" and isas["x86-64-v3"] == "AVX2"
    assert observations["native"].std() > 0  # the episode shows something
    for march in ("x86-64-v3", "x86-64"):
        assert np.array_equal(observations[march], observations["native"]), march
