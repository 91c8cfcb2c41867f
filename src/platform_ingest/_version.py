"""The installed version of `platform_ingest`, from the distribution's metadata.

The version has one place: the root pyproject.toml's `version`. The development install
(`run-event-journal`, both halves) takes it from there, and so does the `platform-ingest` wheel
(packaging/platform-ingest/pyproject.toml reads it when it is built).
"""

from __future__ import annotations

from importlib import metadata

DISTRIBUTIONS = ("platform-ingest", "run-event-journal")
"""The distributions this package may be installed from: its own wheel, or the development install."""


def _installed_version() -> str:
    for distribution in DISTRIBUTIONS:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return "0+unknown"  # run from a source tree that was never installed


__version__ = _installed_version()
