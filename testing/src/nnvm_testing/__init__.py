"""Helpers shared by the test suites of the core and of the plugins (they need the dev dependencies,
``hypothesis`` among them; nothing in the compiler imports this package)."""
