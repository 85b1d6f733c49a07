"""Packaging: ships custom_ops/ (C++ op sources of the production libraries), configs/ and the
MJCF assets inside the wheel; benchmarks, and the sources of the bench- and test-only op
libraries, stay in the clone.

The console script (``neuroevo-train``) and the dependencies are declared in pyproject.toml,
whose ``[project]`` table takes precedence over arguments given here. The op libraries are
compiled on first use against the TensorFlow installed at run time
(see neuroevo/ops/build.py), so the wheel itself is pure Python plus C++ sources.
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["neuroevo", "neuroevo.*"]),
        "neuroevo._csrc",
        "neuroevo._configs",
    ],
    package_dir={"neuroevo._csrc": "custom_ops", "neuroevo._configs": "configs"},
    package_data={
        "neuroevo._csrc": ["*/*.cc", "*/*.h", "*/libraries.yaml"],
        "neuroevo._configs": ["*.yaml"],
        "neuroevo.compat": ["data/*.json"],
        "neuroevo.envs": ["assets/*.xml", "assets/*.txt"],
    },
    # Sources of the bench- and test-only op libraries (neuroevo/ops/build.py) stay in the clone.
    exclude_package_data={"neuroevo._csrc": ["*/*_bench_ops.cc", "*/*_testing.cc"]},
)
