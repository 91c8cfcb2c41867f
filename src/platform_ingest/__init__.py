"""platform_ingest: the platform side of the run-event journal.

A pass reads each book's `events.jsonl` and applies every event's effect exactly once into
Postgres: the effects and the attempt's cursor `(engine_run_id, seq)` commit in one transaction.
It reads the journal by the grammar of `engine_events` (`engine_events.grammar`, the one the
engine writes and reads by), and imports nothing else of the engine's package but its shared
helpers (logs, version, safe text, exit codes).

The names here are what a host needs: a database, a sweep of one book or a worker over roots, the
schema's migration, a book's reference in logs, and the errors a caller catches. Every error is in
`platform_ingest.errors`; a projection's interface is `platform_ingest.projections`.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._version import __version__
    from .errors import (
        ConfigError,
        DatabaseError,
        DatabaseTimeout,
        DatabaseUnavailable,
        EmbeddedServerError,
        IngestError,
        JournalUnreadable,
        NotFound,
        ProjectionFailed,
        ProjectionInvalid,
        SchemaTooNew,
        SchemaTooOld,
    )
    from .ingest.book_pass import PassReport, sweep_book
    from .ingest.books import book_ref
    from .store.db import Database, DatabaseSettings
    from .store.schema import migrate
    from .worker.loop import Worker, WorkerSettings

__all__ = [
    "ConfigError",
    "Database",
    "DatabaseError",
    "DatabaseSettings",
    "DatabaseTimeout",
    "DatabaseUnavailable",
    "EmbeddedServerError",
    "IngestError",
    "JournalUnreadable",
    "NotFound",
    "PassReport",
    "ProjectionFailed",
    "ProjectionInvalid",
    "SchemaTooNew",
    "SchemaTooOld",
    "Worker",
    "WorkerSettings",
    "__version__",
    "book_ref",
    "migrate",
    "sweep_book",
]


_SUBMODULES = {
    "book_ref": "ingest.books",
    "Database": "store.db",
    "DatabaseSettings": "store.db",
    "PassReport": "ingest.book_pass",
    "sweep_book": "ingest.book_pass",
    "migrate": "store.schema",
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
