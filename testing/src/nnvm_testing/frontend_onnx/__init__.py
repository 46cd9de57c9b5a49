"""Helpers for tests and benchmarks: reference models (``testing.models``), small models of other shapes
(``testing.shape_models``)."""
