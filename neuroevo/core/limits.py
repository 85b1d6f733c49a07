"""Hard bounds that the Python API, the config checks and the C++ ops share.

Kept free of TensorFlow so that a config is validated against them without importing it.
"""

__all__ = ["MAX_MUJOCO_FRAME_SKIP", "MAX_RAY_WORKERS_PER_NODE", "MAX_SLOTS", "MAX_THREADS"]

# Most slots one env may hold: far more than any evaluator uses, and small enough that a typo
# (10**9) is refused before the op tries to allocate the emulators.
MAX_SLOTS = 1 << 16

# Most threads one thread-count setting may ask for (evaluator workers, gym env threads): each
# evaluator worker is a Python thread plus a TensorFlow inter-op thread with its own stack,
# and far fewer saturate any machine (docs/PERFORMANCE.md); what the machine allows
# (RLIMIT_NPROC, threads-max, address space) is checked too, by neuroevo.run.preflight.
MAX_THREADS = 1024

# Most Ray actors per node: each is a process with its own TensorFlow, env and noise table.
MAX_RAY_WORKERS_PER_NODE = 256

# Most physics steps per MuJoCo agent step (the op's attribute is an int32; gymnasium's tasks
# use 4 or 5).
MAX_MUJOCO_FRAME_SKIP = 1000
