"""The installed version of `platform_ingest`, from the distribution's metadata (one place: pyproject.toml)."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "run-event-journal"
"""The distribution this package is installed from."""

try:
    __version__ = metadata.version(DISTRIBUTION)
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
