"""engine_events: the engine side of the run-event journal.

Events are stored in an outbox table of the engine's own SQLite database in the same transaction as
the engine's checkpoint, then projected as fsynced NDJSON lines to `<book>/events.jsonl`.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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


_SUBMODULES = {
    "Emitter": "._emitter",
    "STREAM_VERSIONS": "._events",
    "BankStop": "._events",
    "Ceiling": "._events",
    "Finished": "._events",
    "PhaseCount": "._events",
    "Progress": "._events",
    "Spend": "._events",
    "UnitDone": "._events",
    "ExitCode": "._exit_codes",
    "BookLock": "._lock",
    "usd_to_micro_usd": "._money",
    "connect": "._schema",
    "__version__": "._version",
    "DurabilityError": ".errors",
    "EngineEventsError": ".errors",
    "EventError": ".errors",
    "FileModeInvalid": ".errors",
    "JournalWriteError": ".errors",
    "LineTooLong": ".errors",
    "MoneyError": ".errors",
    "NotInTransaction": ".errors",
    "ProjectLocked": ".errors",
    "RetentionInvalid": ".errors",
    "StreamFinished": ".errors",
    "StreamVersionNotSupported": ".errors",
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
