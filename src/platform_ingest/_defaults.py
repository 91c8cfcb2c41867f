"""The defaults the command line shows for the options of `run`, `compact`, `prune`, `rebuild` and
`repair`, kept apart from the modules that use them: `platform-ingest` builds every command's
parser on each start, and importing those modules for their defaults cost `sweep` start-up."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

QUIET_FOR_S_DEFAULT = 7 * 24 * 3600.0
"""How long an attempt must be quiet before its line hashes are compacted (a week)."""
ATTEMPTS_PER_RUN_MAX = 64
"""How many attempts one call of `compact_quiet` takes on (the worker calls it again later)."""
RUNS_PER_CALL_MAX = 256
"""How many runs one `prune` call takes on."""
REBUILD_BATCH_EVENTS_MAX = 5_000
"""The most events one rebuild transaction gives a projection."""
SCRUB_BYTES_PER_S_DEFAULT = 1024 * 1024
"""How many bytes of journals a worker reads again a second, on average, to check its books'
applied lines (`run --scrub-bytes-per-s`): 1 MiB/s, under 1% of a core (docs/performance.md)."""
SCRUB_BUSY_WAIT_S = 30.0
"""How long `scrub` waits, between two steps, for a pass holding the book."""
STATUS_TIMEOUT_S = 60.0
"""How long `repair` waits for the engine's status command."""


def _default_status_command() -> str:
    """`engine-events status`, preferring the `engine-events` installed beside this interpreter
    (the same virtualenv or prefix as `platform-ingest`) over whatever `PATH` finds first."""
    beside = Path(sys.executable).parent / "engine-events"
    if beside.is_file() and os.access(beside, os.X_OK):
        return f"{shlex.quote(str(beside))} status"
    return "engine-events status"


DEFAULT_STATUS_COMMAND = _default_status_command()
"""The engine's status command `repair` runs (BOOK_DIR --json appended)."""
