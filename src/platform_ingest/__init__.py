"""platform_ingest: the platform side of the run-event journal.

A pass reads each book's `events.jsonl` and applies every event's effect exactly once into
Postgres: the effects and the attempt's cursor `(engine_run_id, seq)` commit in one transaction.
It reads the journal by the grammar of `engine_events` (`engine_events.grammar`, the one the
engine writes and reads by), and imports nothing else of the engine's package but its shared
helpers (logs, version, safe text, exit codes).
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine_events.grammar import LINE_BYTES_MAX, NESTING_DEPTH_MAX

    from ._version import __version__
    from .decisions.exit_codes import ExitCode, ExitReading, read_exit_code
    from .errors import (
        BookMismatch,
        BookPathConflict,
        BookPathNotStorable,
        ConfigError,
        CursorMoved,
        DatabaseError,
        DatabaseRefusesWrites,
        DatabaseTimeout,
        DatabaseUnavailable,
        DataRefused,
        EmbeddedServerError,
        EngineLive,
        ForeignStreamAhead,
        IngestError,
        JournalMissing,
        JournalNotRegular,
        JournalOutsideRoots,
        JournalUnreadable,
        LineAfterFinished,
        LineBeforeHello,
        LineOutOfPlace,
        LineOutsideStream,
        LineRefused,
        MalformedLine,
        NotFound,
        NotUtf8Path,
        PathOutsideRoots,
        PayloadConflict,
        ProjectionFailed,
        ProjectionInvalid,
        ProjectionStatementRefused,
        RepairError,
        SchemaTooNew,
        SchemaTooOld,
        SequenceGap,
        StatusUnreadable,
        StreamDisowned,
        StreamNotSeen,
        StreamProblem,
        UnsupportedVersion,
    )
    from .ingest.book_pass import BookPass, PassReport, sweep_book
    from .ingest.books import book_ref, register_book
    from .ingest.rebuild import RebuildReport, Unreplayable, rebuild
    from .journal.decode import decode_line
    from .journal.line import Line
    from .store.db import Database, DatabaseSettings
    from .store.schema import migrate, schema_version
    from .worker.loop import Worker, WorkerSettings

__all__ = [
    "LINE_BYTES_MAX",
    "NESTING_DEPTH_MAX",
    "BookMismatch",
    "BookPass",
    "BookPathConflict",
    "BookPathNotStorable",
    "ConfigError",
    "CursorMoved",
    "DataRefused",
    "Database",
    "DatabaseError",
    "DatabaseRefusesWrites",
    "DatabaseSettings",
    "DatabaseTimeout",
    "DatabaseUnavailable",
    "EmbeddedServerError",
    "EngineLive",
    "ExitCode",
    "ExitReading",
    "ForeignStreamAhead",
    "IngestError",
    "JournalMissing",
    "JournalNotRegular",
    "JournalOutsideRoots",
    "JournalUnreadable",
    "Line",
    "LineAfterFinished",
    "LineBeforeHello",
    "LineOutOfPlace",
    "LineOutsideStream",
    "LineRefused",
    "MalformedLine",
    "NotFound",
    "NotUtf8Path",
    "PassReport",
    "PathOutsideRoots",
    "PayloadConflict",
    "ProjectionFailed",
    "ProjectionInvalid",
    "ProjectionStatementRefused",
    "RebuildReport",
    "RepairError",
    "SchemaTooNew",
    "SchemaTooOld",
    "SequenceGap",
    "StatusUnreadable",
    "StreamDisowned",
    "StreamNotSeen",
    "StreamProblem",
    "Unreplayable",
    "UnsupportedVersion",
    "Worker",
    "WorkerSettings",
    "__version__",
    "book_ref",
    "decode_line",
    "migrate",
    "read_exit_code",
    "rebuild",
    "register_book",
    "schema_version",
    "sweep_book",
]


_SUBMODULES = {
    "LINE_BYTES_MAX": "journal.decode",
    "NESTING_DEPTH_MAX": "journal.decode",
    "Line": "journal.line",
    "decode_line": "journal.decode",
    "book_ref": "ingest.books",
    "register_book": "ingest.books",
    "Database": "store.db",
    "DatabaseSettings": "store.db",
    "ExitCode": "decisions.exit_codes",
    "ExitReading": "decisions.exit_codes",
    "read_exit_code": "decisions.exit_codes",
    "BookPass": "ingest.book_pass",
    "PassReport": "ingest.book_pass",
    "sweep_book": "ingest.book_pass",
    "RebuildReport": "ingest.rebuild",
    "Unreplayable": "ingest.rebuild",
    "rebuild": "ingest.rebuild",
    "migrate": "store.schema",
    "schema_version": "store.schema",
    "Worker": "worker.loop",
    "WorkerSettings": "worker.loop",
    "__version__": "_version",
}
"""The submodule each public name comes from, imported on the name's first use (PEP 562): every
import of a submodule (`platform_ingest.cli.main` by the console script) runs this file first, and a
command such as `sweep` has no use for most of them. The other public names are the errors'."""


def __getattr__(name: str) -> object:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f".{_SUBMODULES.get(name, 'errors')}", __name__)
    value = getattr(module, name)
    globals()[name] = value  # once: later uses do not come back here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
