"""Packaging: ships the C++ op sources in custom_ops/ inside the wheel as neuroevo._csrc.

The op libraries are compiled on first use against the TensorFlow installed at run time
(see neuroevo/ops/build.py), so the wheel itself is pure Python plus C++ sources.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["neuroevo", "neuroevo.*"]), "neuroevo._csrc"],
    package_dir={"neuroevo._csrc": "custom_ops"},
    package_data={"neuroevo._csrc": ["*/*.cc", "*/*.h", "*.txt"]},
    entry_points={"console_scripts": ["neuroevo-train = neuroevo.train:main"]},
)
