"""platform_ingest: the platform side of the run-event journal.

A pass reads each book's `events.jsonl` and applies every event's effect exactly once into
Postgres: the effects and the attempt's cursor `(engine_run_id, seq)` commit in one transaction.
`platform_ingest` never imports the engine's package; the two meet only in the file format and the
shared test vectors.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._books import book_ref, register_book
    from ._db import Database, DatabaseSettings
    from ._decode import LINE_BYTES_MAX, NESTING_DEPTH_MAX, Line, decode_line
    from ._exit_codes import ExitCode, ExitReading, read_exit_code
    from ._pass import BookPass, PassReport, sweep_book
    from ._rebuild import RebuildReport, Unreplayable, rebuild
    from ._schema import migrate, schema_version
    from ._version import __version__
    from ._worker import Worker, WorkerSettings
    from .errors import (
        BookMismatch,
        BookPathConflict,
        BookPathNotStorable,
        ConfigError,
        CursorMoved,
        DatabaseError,
        DatabaseTimeout,
        DatabaseUnavailable,
        DataRefused,
        EmbeddedServerError,
        EngineLive,
        ForeignStreamAhead,
        HelloNotFirst,
        IngestError,
        InvalidJson,
        InvalidUtf8,
        JournalMissing,
        JournalNotRegular,
        JournalOutsideRoots,
        JournalUnreadable,
        LineAfterFinished,
        LineBeforeHello,
        LineRefused,
        LineTooLong,
        MalformedLine,
        MoneyNotInteger,
        NestingTooDeep,
        NotAnObject,
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
        WrongType,
    )

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
    "DatabaseSettings",
    "DatabaseTimeout",
    "DatabaseUnavailable",
    "EmbeddedServerError",
    "EngineLive",
    "ExitCode",
    "ExitReading",
    "ForeignStreamAhead",
    "HelloNotFirst",
    "IngestError",
    "InvalidJson",
    "InvalidUtf8",
    "JournalMissing",
    "JournalNotRegular",
    "JournalOutsideRoots",
    "JournalUnreadable",
    "Line",
    "LineAfterFinished",
    "LineBeforeHello",
    "LineRefused",
    "LineTooLong",
    "MalformedLine",
    "MoneyNotInteger",
    "NestingTooDeep",
    "NotAnObject",
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
    "WrongType",
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
    "LINE_BYTES_MAX": "_decode",
    "NESTING_DEPTH_MAX": "_decode",
    "Line": "_decode",
    "decode_line": "_decode",
    "book_ref": "_books",
    "register_book": "_books",
    "Database": "_db",
    "DatabaseSettings": "_db",
    "ExitCode": "_exit_codes",
    "ExitReading": "_exit_codes",
    "read_exit_code": "_exit_codes",
    "BookPass": "_pass",
    "PassReport": "_pass",
    "sweep_book": "_pass",
    "RebuildReport": "_rebuild",
    "Unreplayable": "_rebuild",
    "rebuild": "_rebuild",
    "migrate": "_schema",
    "schema_version": "_schema",
    "Worker": "_worker",
    "WorkerSettings": "_worker",
    "__version__": "_version",
}
"""The submodule each public name comes from, imported on the name's first use (PEP 562): every
import of a submodule (`platform_ingest._cli` by the console script) runs this file first, and a
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
