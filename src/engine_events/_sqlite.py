"""SQLite's errors, translated here and only here into the `engine_events` tree.

Every statement the engine itself runs on the book's database (the outbox, the schema, the status
and repair, the projection, the emitter's transactions) runs under `translated()`, used as a `with`
block or as a decorator, the way `platform_ingest.store.db._translated` does for Postgres. A driver
error comes out as a `BookDatabaseError`:

    sqlite3.IntegrityError                        -> BookDatabaseRefused     (an IntegrityError)
    sqlite3.OperationalError, SQLITE_BUSY/LOCKED  -> BookDatabaseBusy        (an OperationalError)
    any other sqlite3.OperationalError            -> BookDatabaseFailed      (an OperationalError)
    any other sqlite3.Error                       -> BookDatabaseError       (a DatabaseError)

Each keeps the driver's message (so what a command prints is unchanged), its `sqlite_errorcode`
and `sqlite_errorname`, and the driver error as its cause. Each is still a `sqlite3.Error` of the
same DB-API family, so a host that catches `sqlite3.OperationalError` around `Emitter.transaction`
catches it as before. An error already translated passes through. The host's own statements, run
inside `Emitter.transaction`'s block, are the host's: they are never translated.
"""

from __future__ import annotations

import sqlite3
from contextlib import ContextDecorator
from types import TracebackType

from .errors import (
    BookDatabaseBusy,
    BookDatabaseError,
    BookDatabaseFailed,
    BookDatabaseRefused,
)

_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def translate(error: sqlite3.Error) -> BookDatabaseError:
    """The `engine_events` error for a driver error (see the module), not yet raised."""
    if isinstance(error, BookDatabaseError):
        return error
    code = getattr(error, "sqlite_errorcode", None)
    kind: type[BookDatabaseError]
    if isinstance(error, sqlite3.IntegrityError):
        kind = BookDatabaseRefused
    elif isinstance(error, sqlite3.OperationalError):
        busy = code is not None and code & 0xFF in _BUSY_CODES
        kind = BookDatabaseBusy if busy else BookDatabaseFailed
    else:
        kind = BookDatabaseError
    translated = kind(*error.args)
    name = getattr(error, "sqlite_errorname", None)
    if code is not None and name is not None:
        translated.sqlite_errorcode = code
        translated.sqlite_errorname = name
    return translated


class _Translated(ContextDecorator):
    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if isinstance(error, sqlite3.Error) and not isinstance(error, BookDatabaseError):
            raise translate(error) from error


_TRANSLATED = _Translated()


def translated() -> _Translated:
    """A context manager (or decorator) under which SQLite's errors become `BookDatabaseError`s."""
    return _TRANSLATED
