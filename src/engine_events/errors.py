"""The errors `engine_events` raises, rooted in one class.

    EngineEventsError
     ├── MoneyError (ValueError)           a money value that is not integer micro-USD
     ├── EventError (ValueError)           an event that cannot be encoded as a stream 1.3 line
     │    └── LineTooLong                  the encoded line would pass the 1 MiB limit
     ├── LineError (ValueError)            a journal line a reader must refuse (the grammar's,
     │    │                                `engine_events.grammar`: the platform's decoder too)
     │    ├── MalformedLine                the line breaks a rule of its form; `reason` names it
     │    └── UnsupportedVersion           a hello of a stream major other than 1
     ├── StreamVersionNotSupported         the host asked for a stream version the emitter
     │    (ValueError)                     does not write (it writes `STREAM_VERSIONS`)
     ├── RetentionInvalid (ValueError)     a retention that is not a `timedelta` of zero or more
     ├── FileModeInvalid (ValueError)      a file mode that takes the owner's read or write away,
     │                                     or holds more than read and write bits
 ├── NotInTransaction (RuntimeError)   `emit` called outside the host's open transaction
     ├── StreamFinished (RuntimeError)     `emit` after the stream's `finished` was stored
     ├── DurabilityError                   the host's SQLite connection does not commit durably
     ├── SchemaMismatch                    the database was written by a newer engine_events
     ├── ProjectLocked                     another process holds the book's lock
     ├── BookDirectoryError (OSError)      the book directory is missing or not writable
     ├── NotARegularFile (OSError)         `verify` was given a FIFO, socket, device or directory
     ├── JournalWriteError (OSError)       the journal could not be written (policy "fail")
     ├── BookDatabaseError                 SQLite failed a statement of the engine (`_sqlite`);
     │    │ (sqlite3.DatabaseError)        the driver's message, codes and family are kept
     │    ├── BookDatabaseRefused          a constraint refused the write (sqlite3.IntegrityError)
     │    ├── BookDatabaseBusy             another connection holds the database: SQLITE_BUSY or
     │    │                                SQLITE_LOCKED (sqlite3.OperationalError)
     │    └── BookDatabaseFailed           any other operational failure: I/O, a full disk, a
     │                                     file that cannot be opened (sqlite3.OperationalError)
     └── SimulationError (RuntimeError)    `engine_events.testing`'s world used out of order

Each error that maps to an engine exit code carries it as `exit_code` (see `ExitCode`).
"""

from __future__ import annotations

import sqlite3

from ._error_root import EngineEventsError
from ._exit_codes import ExitCode
from .grammar import LineError, MalformedLine, UnsupportedVersion

__all__ = [
    "BookDatabaseBusy",
    "BookDatabaseError",
    "BookDatabaseFailed",
    "BookDatabaseRefused",
    "BookDirectoryError",
    "DurabilityError",
    "EngineEventsError",
    "EventError",
    "FileModeInvalid",
    "JournalWriteError",
    "LineError",
    "LineTooLong",
    "MalformedLine",
    "MoneyError",
    "NotARegularFile",
    "NotInTransaction",
    "ProjectLocked",
    "RetentionInvalid",
    "SchemaMismatch",
    "SimulationError",
    "StreamFinished",
    "StreamVersionNotSupported",
    "UnsupportedVersion",
]


class MoneyError(EngineEventsError, ValueError):
    """A money value that is not a non-negative integer of micro-USD.

    Floats, strings, None and bools are refused, never read as zero.
    """

    def __init__(self, field: str, value: object, reason: str) -> None:
        super().__init__(f"money field {field!r}: {reason} (got {type(value).__name__})")
        self.field = field
        self.reason = reason


class EventError(EngineEventsError, ValueError):
    """An event whose fields cannot be put on a stream 1.3 line."""


class LineTooLong(EventError):
    """The encoded line would be longer than the 1 MiB limit (including its newline)."""

    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(f"line of {size_bytes} bytes exceeds the limit of {limit_bytes} bytes")
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class StreamVersionNotSupported(EngineEventsError, ValueError):
    """The host asked for a stream version this emitter does not write: a configuration error
    (exit 10), refused before the book is touched."""

    exit_code = ExitCode.CONFIG_INVALID

    def __init__(self, version: object, supported: tuple[str, ...]) -> None:
        super().__init__(
            f"stream version {version!r} is not one this emitter writes ({', '.join(supported)})"
        )
        self.version = version
        self.supported = supported


class RetentionInvalid(EngineEventsError, ValueError):
    """The host asked for a retention that is not a `datetime.timedelta` of zero or more (a
    number of seconds, a negative span): a configuration error (exit 10), refused before the book
    is touched."""

    exit_code = ExitCode.CONFIG_INVALID


class FileModeInvalid(EngineEventsError, ValueError):
    """The host asked for a mode for the book's files that is not an `int` of read and write bits
    keeping the owner's read and write (0o600 to 0o666): a configuration error (exit 10), refused
    before the book is touched."""

    exit_code = ExitCode.CONFIG_INVALID


class NotInTransaction(EngineEventsError, RuntimeError):
    """`emit` was called while the host's connection had no open transaction.

    An event must be committed together with the checkpoint it describes.
    """


class StreamFinished(EngineEventsError, RuntimeError):
    """`emit` after the stream's `finished`: that line is the last of its stream.

    Only a stored `finished` counts: one that was rolled back with its transaction does not.
    """

    def __init__(self, finished_seq: int) -> None:
        super().__init__(
            f"the stream ended with finished at seq {finished_seq}: nothing may follow it"
        )
        self.finished_seq = finished_seq


class DurabilityError(EngineEventsError):
    """The host's SQLite connection would not make a commit durable before its line is written."""

    exit_code = ExitCode.CONFIG_INVALID


class SchemaMismatch(EngineEventsError):
    """The book's database carries a newer engine_events schema than this code knows."""

    exit_code = ExitCode.SCHEMA_MISMATCH

    def __init__(self, found_version: int, known_version: int) -> None:
        super().__init__(
            f"database schema version {found_version} is newer than this engine_events "
            f"(knows up to {known_version}); refusing to touch it"
        )
        self.found_version = found_version
        self.known_version = known_version


class ProjectLocked(EngineEventsError):
    """Another live process holds the book's `.engine.lock`."""

    exit_code = ExitCode.PROJECT_LOCKED


class BookDirectoryError(EngineEventsError, OSError):
    """The book directory is missing, not a directory, or not writable."""

    exit_code = ExitCode.SOURCE_UNREADABLE


class NotARegularFile(EngineEventsError, OSError):
    """A journal path that names a FIFO, a socket, a device or a directory: reading one could
    block forever or never end, so it is refused before any read."""


class JournalWriteError(EngineEventsError, OSError):
    """The journal could not be written and the host chose the `fail` policy.

    The committed rows stay in the outbox; the next start projects them.
    """


class SimulationError(EngineEventsError, RuntimeError):
    """A simulated world of `engine_events.testing` used out of order: a step or a crash with no
    engine process running, a start while one runs, a repair or a status read over a running one."""


class BookDatabaseError(EngineEventsError, sqlite3.DatabaseError):
    """SQLite failed a statement the engine ran on the book's database (translated once, in
    `_sqlite`). The driver's message is the message; `sqlite_errorcode` and `sqlite_errorname` are
    the driver's, and the driver's error is the cause."""


class BookDatabaseRefused(BookDatabaseError, sqlite3.IntegrityError):
    """A constraint of the database refused the engine's write."""


class BookDatabaseBusy(BookDatabaseError, sqlite3.OperationalError):
    """Another connection holds the database (SQLITE_BUSY or SQLITE_LOCKED) past the wait."""


class BookDatabaseFailed(BookDatabaseError, sqlite3.OperationalError):
    """Any other operational failure: an I/O error, a full disk, a file that cannot be opened."""
