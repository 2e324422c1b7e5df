"""Helpers shared by the tests; ``fixtures`` is registered as a pytest plugin by conftest."""
