"""What every layer uses and that uses nothing of neuroevo's: declared parameters
(:mod:`~neuroevo.core.params`), registries (:mod:`~neuroevo.core.registry`), shared bounds
(:mod:`~neuroevo.core.limits`), slot and seed validation (:mod:`~neuroevo.core.indices`),
resource checks (:mod:`~neuroevo.core.resources`), safe file writes
(:mod:`~neuroevo.core.files`), optional dependencies (:mod:`~neuroevo.core.extras`) and the
process state a library call puts back (:mod:`~neuroevo.core.process_state`).

A leaf: these modules import only each other.
"""
