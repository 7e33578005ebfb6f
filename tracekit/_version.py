"""The package version, in one place: pyproject.toml reads it (hatch), tracekit and ingest runs report it."""

__version__ = "0.1.0"
