"""engine_events: the engine side of the run-event journal.

Events are stored in an outbox table of the engine's own SQLite database in the same transaction as
the engine's checkpoint, then projected as fsynced NDJSON lines to `<book>/events.jsonl`.
"""

from ._emitter import Emitter
from ._events import (
    STREAM_VERSIONS,
    BankStop,
    Ceiling,
    Finished,
    PhaseCount,
    Progress,
    Spend,
    UnitDone,
)
from ._exit_codes import ExitCode
from ._lock import BookLock
from ._money import usd_to_micro_usd
from ._schema import connect
from ._version import __version__
from .errors import (
    DurabilityError,
    EngineEventsError,
    EventError,
    FileModeInvalid,
    JournalWriteError,
    LineTooLong,
    MoneyError,
    NotInTransaction,
    ProjectLocked,
    RetentionInvalid,
    StreamFinished,
    StreamVersionNotSupported,
)

__all__ = [
    "STREAM_VERSIONS",
    "BankStop",
    "BookLock",
    "Ceiling",
    "DurabilityError",
    "Emitter",
    "EngineEventsError",
    "EventError",
    "ExitCode",
    "FileModeInvalid",
    "Finished",
    "JournalWriteError",
    "LineTooLong",
    "MoneyError",
    "NotInTransaction",
    "PhaseCount",
    "Progress",
    "ProjectLocked",
    "RetentionInvalid",
    "Spend",
    "StreamFinished",
    "StreamVersionNotSupported",
    "UnitDone",
    "__version__",
    "connect",
    "usd_to_micro_usd",
]
