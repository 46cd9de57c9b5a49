"""The ``cuda`` target's hook implementations."""
