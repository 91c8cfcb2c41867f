"""The root of every error `engine_events` raises (`errors` tells the whole tree).

Alone in its module so that the grammar (`grammar`), which the platform imports too, reaches it
without the rest of `errors` (whose SQLite errors would bring `sqlite3` to a platform module).
"""

from __future__ import annotations

from ._exit_codes import ExitCode


class EngineEventsError(Exception):
    """Root of every error raised by `engine_events`."""

    exit_code: ExitCode = ExitCode.INFRA
