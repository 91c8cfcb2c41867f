"""The exit statuses of `platform-ingest` (docs/platform/cli.md, "Exit codes")."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    """Done. A book that ends quarantined or stalled is state, not a failure of `sweep`."""
    FAILED = 1
    """The command could not do its work (database unavailable, a pass that could not finish)."""
    USAGE = 2
    """Bad usage or input: an unknown book, a path outside the roots, a refused operation, a
    login Postgres refused (a wrong password, an unknown role)."""
    ENGINE_LIVE = 3
    """`repair` refused: the engine is live."""
    NOT_REPLAYABLE = 4
    """`rebuild` caught up all it could, and some seqs cannot be replayed (each in its report)."""
    SCHEMA_CHANGED = 5
    """`run`: a newer release's `migrate` changed the schema under the worker, which stopped: start
    it again on the new release."""
    MISMATCH = 6
    """`scrub` found an applied line the journal no longer holds as it was (each in its report)."""
