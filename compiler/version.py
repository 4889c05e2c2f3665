"""The single source of temper's version string (read by pyproject.toml and written into artifacts)."""

__version__ = "0.1.0"
