"""engine_events: the engine side of the run-event journal.

Events are stored in an outbox table of the engine's own SQLite database in the same transaction as
the engine's checkpoint, then projected as fsynced NDJSON lines to `<book>/events.jsonl`.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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


_SUBMODULES = {
    "Emitter": "._emitter",
    "JournalErrorPolicy": "._emitter",
    "STREAM_VERSION": "._events",
    "STREAM_VERSIONS": "._events",
    "BankStop": "._events",
    "Ceiling": "._events",
    "Event": "._events",
    "Finished": "._events",
    "Hello": "._events",
    "PhaseCount": "._events",
    "Progress": "._events",
    "Spend": "._events",
    "UnitDone": "._events",
    "ExitCode": "._exit_codes",
    "DEFAULT_FILE_MODE": "._file_mode",
    "LINE_BYTES_MAX": "._line",
    "encode_line": "._line",
    "format_time": "._line",
    "BookLock": "._lock",
    "require_micro_usd": "._money",
    "usd_to_micro_usd": "._money",
    "PruneResult": "._prune",
    "DATABASE_FILE_NAME": "._schema",
    "connect": "._schema",
    "__version__": "._version",
    "BookDirectoryError": ".errors",
    "DurabilityError": ".errors",
    "EngineEventsError": ".errors",
    "EventError": ".errors",
    "FileModeInvalid": ".errors",
    "JournalWriteError": ".errors",
    "LineError": ".errors",
    "LineTooLong": ".errors",
    "MalformedLine": ".errors",
    "MoneyError": ".errors",
    "NotARegularFile": ".errors",
    "NotInTransaction": ".errors",
    "ProjectLocked": ".errors",
    "RetentionInvalid": ".errors",
    "SchemaMismatch": ".errors",
    "StreamFinished": ".errors",
    "StreamVersionNotSupported": ".errors",
    "UnsupportedVersion": ".errors",
    "Line": ".grammar",
    "decode_line": ".readers.decode",
}
"""The submodule each public name comes from, imported on the name's first use (PEP 562): the
platform imports `engine_events.grammar`, which runs this file first, and has no use for the
emitter, the outbox or the book's SQLite database."""


def __getattr__(name: str) -> object:
    if name not in _SUBMODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_SUBMODULES[name], __name__), name)
    globals()[name] = value  # once: later uses do not come back here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
