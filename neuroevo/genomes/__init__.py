"""The shared noise table (:mod:`~neuroevo.genomes.noise`) and the compact genomes that point
into it, with their materialisation into weights (:mod:`~neuroevo.genomes.genome`).

A leaf: it imports only :mod:`neuroevo.core`.
"""
