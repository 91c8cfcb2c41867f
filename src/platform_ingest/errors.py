"""The errors `platform_ingest` raises, rooted in one class.

    IngestError
     ├── ConfigError (ValueError)              a bad option, path or registration
     │    ├── PathOutsideRoots                 a book or journal path that escapes its roots
     │    ├── BookPathConflict                 a book id already registered at another path
     │    ├── NotUtf8Path                      a directory name that is not UTF-8
     │    └── ProjectionInvalid                a projection that cannot be loaded or is not one
     ├── NotFound (LookupError)                no such book, run or attempt
     ├── JournalUnreadable (OSError)           the journal could not be opened or read
     │    ├── JournalMissing                   gone while an attempt awaits its lines
     │    ├── JournalNotRegular                a FIFO, socket, device, directory or symlink
     │    └── JournalOutsideRoots              the book directory was swapped or moved
     ├── UnsupportedVersion (LineRefused)      a hello of a major other than 1: its stream refused
     ├── DatabaseError                         Postgres said no (translated in `db`, by SQLSTATE)
     │    ├── DataRefused                      a book's value Postgres cannot store (22, 23, 54)
     │    ├── DatabaseUnavailable (ConnectionError)   connection lost or refused: retryable
     │    │    └── DatabaseRefusesWrites       the server answers but writes nothing: disk full, read-only
     │    ├── DatabaseTimeout (TimeoutError)          a statement or lock timeout: retryable
     │    ├── DatabaseAuthenticationFailed     the server refused the role's login (28P01, 28000)
     │    ├── SchemaTooNew                     the database was migrated by a newer platform_ingest
     │    ├── SchemaTooOld                     the database needs `platform-ingest migrate`
     │    └── CursorMoved                      another pass moved the cursor first (resync, no retry)
     ├── ProjectionFailed                      a projection raised: its batch was rolled back
     │    └── ProjectionStatementRefused       its SQL would touch the platform's promises
     ├── EmbeddedServerError (RuntimeError)    the embedded Postgres is not installed, or did not start or stop
     └── RepairError                           the repair channel could not be used
          ├── EngineLive                       the engine holds the book's lock (exit 12)
          ├── StatusUnreadable                 the status command failed or printed nonsense
          ├── StreamNotSeen                    the engine's latest stream is not in Postgres yet
          └── StreamDisowned                   the engine's latest stream was disowned

A line no 1.x reader may accept is refused by the grammar (`engine_events.grammar`, the engine's
readers' too): `LineRefused`, kind "malformed" when it is its one `MalformedLine`, whose `reason`
names the rule the line breaks (`engine_events.grammar.MalformedReason`), and this package's
`UnsupportedVersion`.

A refusal carries fields, not only a message: `kind` (the name `show` prints), `seq` (None when
the line has none) and `offset` (the byte offset where the offending line starts). Messages
never hold money amounts. What the rules find from a line's place or from the cursor (a gap, a
conflict, a line out of place, another book's hello, a foreign stream ahead) is never raised: it
is a record (`decisions.problems.ProblemRecord`), built where it is found.

An error is built whole and never changed once made: what a later step knows (the offset of a
line the decoder refused, the events a projection failed on, the line a refusal of Postgres
belongs to) goes into a new error of the same class (`_with`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Self

from engine_events import grammar
from engine_events.grammar import LineError
from engine_events.grammar import MalformedLine as MalformedLine  # noqa: PLC0414 (re-exported)

LineRefused = LineError
"""A line no reader of stream 1.x may accept: the grammar's base of a refused line
(`engine_events.grammar`), whose one `MalformedLine` names the rule broken (`reason`). Its
`kind` is the name `show` prints; when the line is a readable hello (docs/reference/stream-format.md,
"A hello that starts its stream"), `engine_run_id` names the stream it starts and `stream_version`
is its version when that can be read: the refusal is that stream's, never the one before it."""

StreamProblemKind = Literal[
    "stream_problem",
    "malformed",
    "unsupported_version",
    "payload_conflict",
    "gap",
    "book_mismatch",
    "foreign_stream_ahead",
]
"""The kinds of a problem of a journal's lines: what the decoder and the rules find in them."""
BookProblemKind = Literal[
    "journal_missing",
    "journal_unreadable",
    "journal_not_regular",
    "journal_outside_roots",
    "database_refused",
    "database_timeout",
    "book_path_conflict",
]
"""The kinds of a book's standing problems (`book_problems`). `database_refused` is also kept on
an attempt: a value of its lines that Postgres cannot store."""
ProblemKind = StreamProblemKind | BookProblemKind
"""Every problem kind `show` prints."""


def _with(error: Any, **fields: object) -> Any:
    """A new error of `error`'s class, with its message, its fields and its cause, and `fields`
    over them; `error` is left as it was (it may be held elsewhere: a test, a log, a cache)."""
    made = type(error).__new__(type(error), *error.args)
    made.__dict__.update(error.__dict__)
    made.__dict__.update(fields)
    made.__cause__ = error.__cause__
    return made


class IngestError(Exception):
    """Root of every error raised by `platform_ingest`."""


class ConfigError(IngestError, ValueError):
    """A bad option, path or registration: the command cannot do what was asked."""


class PathOutsideRoots(ConfigError):
    """A book directory or its journal resolves (through a symlink) outside the allowed roots."""

    def __init__(self, path: str, roots: list[str]) -> None:
        super().__init__(f"{path} resolves outside the allowed roots ({', '.join(roots)})")
        self.path = path
        self.roots = roots


class BookPathConflict(ConfigError):
    """The book id (the directory's name) is already registered for another directory."""

    def __init__(self, path: str, registered_path: str) -> None:
        super().__init__(
            f"{path}: a book with this directory name is already registered at {registered_path}"
        )
        self.path = path
        self.registered_path = registered_path


class NotUtf8Path(ConfigError):
    """A path whose bytes are not UTF-8: it can be neither a book id nor a stored path."""

    def __init__(self, ref: str) -> None:
        super().__init__(f"a directory whose name is not UTF-8 ({ref}) cannot be a book: rename it")
        self.ref = ref


class BookPathNotStorable(ConfigError):
    """Postgres refuses to store a book directory's path (a path longer than its index can hold):
    that directory is refused, every other book is registered."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path} cannot be registered: Postgres refuses its path ({detail})")
        self.path = path


class NotFound(IngestError, LookupError):
    """No such book, run or attempt."""


class JournalUnreadable(IngestError, OSError):
    """The journal exists but could not be opened or read (permissions, I/O error).

    Nothing was applied from it in this pass; the cursor in Postgres is untouched. `kind` is the
    name the book's problem is shown under (`show`).
    """

    kind: ClassVar[BookProblemKind] = "journal_unreadable"


class JournalMissing(JournalUnreadable):
    """The book's journal, or its whole directory, is gone while an attempt of the book still
    awaits lines from it (`pending` after lines were read, `active`, `parked`). Nothing is
    applied; the problem ends when the journal is put back, or with `exited` or `abandon`."""

    kind = "journal_missing"


class JournalNotRegular(JournalUnreadable):
    """The journal's path holds something other than a regular file: a FIFO, a socket, a device,
    a directory or a symbolic link. Nothing is read from it (it could block, or never end)."""

    kind = "journal_not_regular"


class JournalOutsideRoots(JournalUnreadable):
    """The book directory is no longer the directory registered for it: it (or a parent) was
    swapped for a symbolic link, or moved, so its journal could lie outside the roots."""

    kind = "journal_outside_roots"


class UnsupportedVersion(IngestError, grammar.UnsupportedVersion):
    """A hello of a stream major this reader does not speak: the whole stream is refused. The
    engine's `UnsupportedVersion` (a `LineRefused`) with the stream it names, so one `except`
    catches the refusal from either side's reader."""

    kind = "unsupported_version"
    engine_run_id: str  # always named: the stream it refuses

    def __init__(
        self, version: str, *, engine_run_id: str, book_id: str, seq: int | None = 1
    ) -> None:
        super().__init__(f"stream version {version} is not supported (reads 1.x)", seq=seq)
        self.version = version
        self.engine_run_id = engine_run_id
        self.stream_version = version
        self.book_id = book_id


class DatabaseError(IngestError):
    """Postgres refused or failed an operation (translated from the driver in `db`)."""

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        """The SQLSTATE Postgres gave (None: raised by the client, or by this package)."""


class DataRefused(DatabaseError):
    """Postgres cannot store a value one book's lines carry (SQLSTATE class 22, 23 or 54: a data
    exception, a constraint, a program limit such as an index row too large). Not retryable: the
    same lines meet the same refusal. The pass records it on the stream that carried it."""

    evidence: tuple[str | None, int | None, int] | None = None
    """(stream, seq, byte offset) of the one line whose batch Postgres refused, when known."""

    def of_line(self, evidence: tuple[str | None, int | None, int]) -> DataRefused:
        """This refusal, known to belong to one line: a new error naming it."""
        made: DataRefused = _with(self, evidence=evidence)
        return made


class DatabaseUnavailable(DatabaseError, ConnectionError):
    """The connection was lost or could not be made. Retryable: the cursor is in Postgres."""


class DatabaseRefusesWrites(DatabaseUnavailable):
    """The server answers, but writes nothing: its disk is full (SQLSTATE 53100), or it is
    read-only (25006: a hot standby, `default_transaction_read_only`). The same for every book,
    and not mended by connecting again at once: the caller waits (the worker), or stops (a
    sweep). Nothing of the refused transaction was committed."""


class DatabaseAuthenticationFailed(DatabaseError):
    """The server refused to let the role in: a wrong or missing password (SQLSTATE 28P01), a
    role it does not know or pg_hba.conf refusing the login (28000). Not retryable: connecting
    again meets the same refusal until the credentials or the server's rules change."""

    def __init__(self, message: str, *, sqlstate: str, role: str) -> None:
        super().__init__(message, sqlstate=sqlstate)
        self.role = role
        """The role the login was refused to."""


class DatabaseTimeout(DatabaseError, TimeoutError):
    """A statement or lock wait passed its bound. Retryable, and shown, never a hang."""


class SchemaTooNew(DatabaseError):
    """The database carries a schema version newer than this platform_ingest knows."""

    def __init__(self, found_version: int, known_version: int) -> None:
        super().__init__(
            f"database schema version {found_version} is newer than this platform_ingest "
            f"(knows up to {known_version}); refusing to touch it"
        )
        self.found_version = found_version
        self.known_version = known_version


class SchemaTooOld(DatabaseError):
    """The database is not migrated to this platform_ingest's schema yet."""

    def __init__(self, found_version: int, known_version: int) -> None:
        super().__init__(
            f"database schema version {found_version} is older than {known_version}: "
            "run `platform-ingest migrate` first"
        )
        self.found_version = found_version
        self.known_version = known_version


class SchemaChanged(SchemaTooNew):
    """A `migrate` of a newer release ran under a running worker: the database's schema version is
    now newer than the one this worker was built for. The worker takes no pass any more and exits
    for its supervisor to start it on the new release (docs/platform/workers.md, "Upgrading a running fleet")."""

    def __init__(self, found_version: int, known_version: int) -> None:
        DatabaseError.__init__(
            self,
            f"the schema changed under this worker: the database is at schema version "
            f"{found_version}, this release was built for {known_version}",
        )
        self.found_version = found_version
        self.known_version = known_version


class SchemaNotPermitted(DatabaseError):
    """The role may not change the platform's schema (SQLSTATE 42501): `migrate` is the owner
    role's (docs/platform/workers.md, "Roles"). Nothing was changed."""


class CursorMoved(DatabaseError):
    """The compare-and-set on an attempt's cursor found another `last_seq`: another pass won.

    Nothing of the transaction was committed; the pass re-reads its state and goes on from the
    cursor it finds. This is contention, not a failure, and never a reason to retry blindly.
    """


class ProjectionInvalid(ConfigError):
    """A projection named on the command line or given in code cannot be loaded, or is not a
    projection (its name, version, `setup` or `apply`)."""


class ProjectionSetupNotPermitted(ProjectionInvalid):
    """The role may not run a projection's `setup` (SQLSTATE 42501), and the owner's `migrate
    --projection` has not set the projection up at this version: the owner role must, once."""


class ProjectionFailed(IngestError):
    """A projection raised while applying a batch: the whole batch was rolled back, cursor
    included. The attempt whose events it was applying shows `projection_failed`; the book is
    tried again after a growing wait. Never a reason to skip the events."""

    def __init__(
        self,
        projection: str,
        detail: str,
        *,
        attempt_id: int | None = None,
        engine_run_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__(f"projection {projection} failed: {detail}")
        self.projection = projection
        self.detail = detail
        self.attempt_id = attempt_id
        self.engine_run_id = engine_run_id
        self.seq = seq
        """The last seq of the events the projection was given."""

    def of_events(self, *, attempt_id: int, engine_run_id: str, seq: int) -> Self:
        """This failure, known to be on the events of `attempt_id` up to `seq`: a new error."""
        made: Self = _with(self, attempt_id=attempt_id, engine_run_id=engine_run_id, seq=seq)
        return made


class ProjectionStatementRefused(ProjectionFailed):
    """A projection's statement was refused before it ran, or its writes reached a platform
    table (`platform_ingest.projections`)."""

    def __init__(
        self,
        projection: str,
        why: str,
        *,
        attempt_id: int | None = None,
        engine_run_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__(
            projection,
            f"statement refused: {why}",
            attempt_id=attempt_id,
            engine_run_id=engine_run_id,
            seq=seq,
        )


class EmbeddedServerError(IngestError, RuntimeError):
    """The embedded Postgres could not be started or stopped, or is not installed (the
    `platform-ingest` distribution ships pgserver only with its `embedded` extra)."""


class RepairError(IngestError):
    """The repair channel (the engine's `status --json`) could not be used."""


class EngineLive(RepairError):
    """A live engine holds the book's lock: repair is refused until the run has stopped."""


class StatusUnreadable(RepairError):
    """The status command failed, timed out, or printed something that is not the status JSON."""


class StreamNotSeen(RepairError):
    """The engine's latest stream is not yet known to Postgres: sweep the book, then repair."""


class StreamDisowned(RepairError):
    """The engine's latest stream was disowned (`disown`): its status speaks for another engine,
    and nothing of it may reach our runs."""
