"""platform_ingest: the platform side of the run-event journal.

A pass reads each book's `events.jsonl` and applies every event's effect exactly once into
Postgres: the effects and the attempt's cursor `(engine_run_id, seq)` commit in one transaction.
`platform_ingest` never imports the engine's package; the two meet only in the file format and the
shared test vectors.
"""

from typing import TYPE_CHECKING

from ._books import book_ref, register_book
from ._db import Database, DatabaseSettings
from ._decode import LINE_BYTES_MAX, NESTING_DEPTH_MAX, Line, decode_line
from ._exit_codes import ExitCode, ExitReading, read_exit_code
from ._pass import BookPass, PassReport, sweep_book
from ._rebuild import RebuildReport, Unreplayable, rebuild
from ._schema import migrate, schema_version
from ._version import __version__
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

if TYPE_CHECKING:
    from ._worker import Worker, WorkerSettings

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


def __getattr__(name: str) -> object:
    """`Worker` and `WorkerSettings` on first use: the worker's modules (change notification,
    metrics) cost a one-shot command such as `sweep` start-up it has no use for."""
    if name in ("Worker", "WorkerSettings"):
        from . import _worker  # noqa: PLC0415

        return getattr(_worker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
