"""Hyperparameter sweeps and population-based training on Ray Tune (docs/SWEEPS.md).

``python -m neuroevo.sweep`` (:mod:`neuroevo.cli.sweep`) and ``ne.sweep(...)``
(:func:`neuroevo.sweeps.api.sweep`) run many trials of one config, each an ordinary run
directory inside the sweep directory. Importing this package imports neither Ray nor
TensorFlow.
"""
