"""The installed version of `platform_ingest`: that of its own wheel (`platform-ingest`), else of
the development install of both halves (`engine_events._version` tells where it comes from)."""

from __future__ import annotations

from engine_events._version import DEVELOPMENT_INSTALL, installed_version

DISTRIBUTIONS = ("platform-ingest", DEVELOPMENT_INSTALL)
"""The distributions this package may be installed from: its own wheel, or the development install."""

__version__ = installed_version(*DISTRIBUTIONS)
