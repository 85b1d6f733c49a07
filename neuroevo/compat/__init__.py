"""Interoperability with other neuroevolution code bases (``uber``: Uber's deep-neuroevolution)."""
