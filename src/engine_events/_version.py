"""The installed version of `engine_events`, from the distribution's metadata.

The version has one place: the root pyproject.toml's `version`. The development install
(`run-event-journal`, both halves) takes it from there, and so does the `engine-events` wheel
(packaging/engine-events/pyproject.toml reads it when it is built).
"""

from __future__ import annotations

from importlib import metadata

DISTRIBUTIONS = ("engine-events", "run-event-journal")
"""The distributions this package may be installed from: its own wheel, or the development install."""


def _installed_version() -> str:
    for distribution in DISTRIBUTIONS:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return "0+unknown"  # run from a source tree that was never installed


__version__ = _installed_version()
