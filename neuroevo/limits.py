"""Hard bounds that the Python API, the config checks and the C++ ops share.

Kept free of TensorFlow so that a config is validated against them without importing it.
"""

__all__ = ["MAX_SLOTS"]

# Most slots one env may hold: far more than any evaluator uses, and small enough that a typo
# (10**9) is refused before the op tries to allocate the emulators.
MAX_SLOTS = 1 << 16
