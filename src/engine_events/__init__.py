"""engine_events: the engine side of the run-event journal.

Events are stored in an outbox table of the engine's own SQLite database in the same transaction as
the engine's checkpoint, then projected as fsynced NDJSON lines to `<book>/events.jsonl`.
"""

from ._emitter import Emitter, JournalErrorPolicy
from ._events import (
    STREAM_VERSION,
    STREAM_VERSIONS,
    BankStop,
    Ceiling,
    Event,
    Finished,
    Hello,
    PhaseCount,
    Progress,
    Spend,
    UnitDone,
)
from ._exit_codes import ExitCode
from ._file_mode import DEFAULT_FILE_MODE
from ._line import LINE_BYTES_MAX, encode_line, format_time
from ._lock import BookLock
from ._money import require_micro_usd, usd_to_micro_usd
from ._prune import PruneResult
from ._schema import DATABASE_FILE_NAME, connect
from ._version import __version__
from .errors import (
    BookDirectoryError,
    DurabilityError,
    EngineEventsError,
    EventError,
    FileModeInvalid,
    JournalWriteError,
    LineError,
    LineTooLong,
    MalformedLine,
    MoneyError,
    NotARegularFile,
    NotInTransaction,
    ProjectLocked,
    RetentionInvalid,
    SchemaMismatch,
    StreamFinished,
    StreamVersionNotSupported,
    UnsupportedVersion,
)
from .grammar import Line
from .readers.decode import decode_line

__all__ = [
    "DATABASE_FILE_NAME",
    "DEFAULT_FILE_MODE",
    "LINE_BYTES_MAX",
    "STREAM_VERSION",
    "STREAM_VERSIONS",
    "BankStop",
    "BookDirectoryError",
    "BookLock",
    "Ceiling",
    "DurabilityError",
    "Emitter",
    "EngineEventsError",
    "Event",
    "EventError",
    "ExitCode",
    "FileModeInvalid",
    "Finished",
    "Hello",
    "JournalErrorPolicy",
    "JournalWriteError",
    "Line",
    "LineError",
    "LineTooLong",
    "MalformedLine",
    "MoneyError",
    "NotARegularFile",
    "NotInTransaction",
    "PhaseCount",
    "Progress",
    "ProjectLocked",
    "PruneResult",
    "RetentionInvalid",
    "SchemaMismatch",
    "Spend",
    "StreamFinished",
    "StreamVersionNotSupported",
    "UnitDone",
    "UnsupportedVersion",
    "__version__",
    "connect",
    "decode_line",
    "encode_line",
    "format_time",
    "require_micro_usd",
    "usd_to_micro_usd",
]
