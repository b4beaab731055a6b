"""The package version (pyproject.toml reads it: one place)."""
__version__ = "0.2.0"
