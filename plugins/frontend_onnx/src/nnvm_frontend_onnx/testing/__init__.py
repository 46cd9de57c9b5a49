"""Helpers for tests and benchmarks: reference models (``testing.models``)."""
