"""The installed version of a half, from its distribution's metadata.

The version has one place: the root pyproject.toml's `version`. The development install
(`run-event-journal`, both halves) takes it from there, and so do the `engine-events` and
`platform-ingest` wheels (packaging/*/pyproject.toml read it when they are built). The platform
asks `installed_version` for its own distributions.
"""

from __future__ import annotations

from importlib import metadata

DEVELOPMENT_INSTALL = "run-event-journal"
"""The development install of both halves."""
DISTRIBUTIONS = ("engine-events", DEVELOPMENT_INSTALL)
"""The distributions `engine_events` may be installed from: its own wheel, or the development install."""


def installed_version(*distributions: str) -> str:
    """The version of the first of `distributions` that is installed; `0+unknown` when none is
    (run from a source tree that was never installed)."""
    for distribution in distributions:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return "0+unknown"


__version__ = installed_version(*DISTRIBUTIONS)
